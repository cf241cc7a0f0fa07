"""``python -m memlib``: see :mod:`memlib.cli`."""

from memlib.cli import main

raise SystemExit(main())
