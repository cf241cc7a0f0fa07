"""Benchmark the memory store: the speed table of issue 11, and a replay of a whole dataset.

The speed table (the default) times the store's own work on synthetic turns with
precomputed random unit embeddings, so no embedding time is counted (VADER's
emotion and valence of each added turn are counted). Each figure is the median of
repeated runs, in milliseconds unless marked, against its target:

* ``add``: one turn into a durable store (``MemoryStore.open``) holding 10,000
  items, with the duplicate check on (default threshold), one transaction each;
  also into an in-memory store, and into the 100,000-item durable store;
* ``consolidate``: a durable store of 10,000 items down to 5,000 (half of it
  forgotten, the forgotten log written), and the steady state of a session end
  (10,000 + 20 items down to 10,000);
* ``retrieve``: top 10 over 100,000 items (usage counts written in one transaction),
  and without the update;
* ``open``: reopen a 100,000-item store (the in-memory index rebuilt from the file);
* the file's size per item.

``--replay`` instead replays every history of a dataset (default: all of LoCoMo) into
in-memory stores from cached embeddings, consolidating at every session end, and
reports how large the store gets against its budget.

``--agent`` instead times the store as an agent loop uses it (issue 13), with the
store's own embedder (the model at the ``fast`` setting, no disk cache), on 1,000
user-like turns: LoCoMo's first turns in order when ``MEMLIB_DATA_DIR`` is set,
else synthetic short sentences. It prints JSON figures:

* ``warm_up_s`` (``MemoryStore.warm_up()`` in a fresh process: model and VADER
  loading) and ``first_add_after_warm_up_ms``;
* ``bare_encode_s``: the model's ``encode`` on the texts alone (batch 64, after
  the warm-up) against ``add_many_s``, all the turns by ``MemoryStore.add_many``
  into a fresh in-memory store; each the median of ``--agent-repeat`` interleaved
  rounds, and ``add_many_over_bare``, their ratio (target: at most 1.2);
* ``single_add_p50_ms`` and ``p90``: one ``MemoryStore.add`` at a time,
  the first call excluded, and the same for the old default embedding path
  (``memlib.embeddings.embed_cached`` through an on-disk cache at 256 word pieces, in a
  fresh temporary cache) for comparison.

``--against FOLDER`` instead runs the speed table for the memlib in ``FOLDER`` (e.g. the
last commit, ``git archive HEAD memlib | tar -x -C /tmp/old``) and for this tree, each
``--rounds`` times in fresh processes, alternately, and prints each operation's median p50
for both and their ratio: what a change costs (issue 22: the store's lock).

``--adaptive`` instead times the consolidation of one ``--mid``-item durable store under today's
default forgetting (``make_policy("value")``: the lowest value goes first) and under
:class:`~memlib.store.AdaptivePolicy` (issue 31's target: at most 2x), paired: the same store
file, the two policies in alternating order (ABBA) in each of ``--pairs`` pairs. The store holds
realistic sessions (``--sessions`` of them, consolidated at each end, so that the stream's need
is counted) in which some user turns restate a turn of an earlier session, and one more session
that ends now: its consolidation counts that session's references against every held turn. It
prints, for a session end (back to ``--mid`` items) and for forgetting half, each policy's median,
the median of the per-pair ratios, and what the reference count alone costs (both policies pay
it: a store counts at every consolidation, whatever its policy).

``--lock-cost`` instead times add and retrieve on a ``--mid``-item store in one process with
the store's lock and with a no-op in its place, in alternating blocks (issue 22's target:
at most 5% on add and retrieve).

Run: .venv/bin/python benchmarks/store.py [--items 100000] [--repeat 200]
     .venv/bin/python benchmarks/store.py --against /tmp/old [--rounds 3] [--items 20000]
     .venv/bin/python benchmarks/store.py --lock-cost [--mid 10000] [--repeat 200] [--blocks 40]
     .venv/bin/python benchmarks/store.py --adaptive [--mid 10000] [--sessions 200] [--pairs 9]
     .venv/bin/python benchmarks/store.py --replay [--dataset locomo] [--budget 0.3]
     .venv/bin/python benchmarks/store.py --agent [--turns 1000] [--agent-repeat 3]
"""

import argparse
import itertools
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

WORDS = "I you we they like love hate need remember said went saw the a my your sister dog trip work peanuts".split()
#: Targets of issue 11, for the default sizes (10,000 and 100,000 items).
TARGETS = {
    "add, 10k-item file": 2.0,
    "consolidate 10k -> 5k, file": 100.0,
    "retrieve top-10 of 100k, file": 25.0,
    "open a 100k-item file": 3.0,
}


def k(n: int) -> str:
    """``10000`` -> ``'10k'``."""
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def turns(n: int, seed: int):
    """``n`` synthetic turns: distinct short texts and random unit embeddings."""
    rng = np.random.default_rng(seed)
    E = rng.normal(size=(n, 384)).astype(np.float32)
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    texts = [" ".join(rng.choice(WORDS, size=8)) + f" #{seed}-{i}" for i in range(n)]
    return texts, E


def fill(store, n: int, seed: int = 0, start_time: float = 0.0, session_len: int = 20):
    texts, E = turns(n, seed)
    for i in range(n):
        store.add(
            texts[i],
            role="user" if i % 2 == 0 else "assistant",
            time=start_time + i / 1000,
            session=f"s{seed}-{i // session_len}",
            embedding=E[i],
            emotion=0.3,
        )
    return store


def ms(f, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        out.append(1e3 * (time.perf_counter() - t0))
    return out


def speed_table(n_big: int, n_mid: int, repeat: int, folder: Path) -> list[dict]:
    from memlib.store import MemoryStore

    rows = []

    def row(name, samples, unit="ms"):
        p50 = statistics.median(samples)
        rows.append(
            {
                "operation": name,
                "p50": round(p50, 3),
                "p90": round(float(np.percentile(samples, 90)), 3),
                "n": len(samples),
                "unit": unit,
                "target": TARGETS.get(name),
                "meets": None if name not in TARGETS else bool(p50 <= TARGETS[name]),
            }
        )

    # add: into a 10k-item durable store and an in-memory one
    texts, E = turns(repeat, seed=99)
    for kind in ("file", "memory"):
        st = fill(MemoryStore(merge_threshold=None), n_mid, seed=1)
        st.merge_threshold = 0.95
        if kind == "file":
            st.persist(folder / "mid.db")
        count = itertools.count()

        def add_one(st=st, count=count):
            i = next(count)
            st.add(texts[i], time=10.0 + i / 1e4, session="bench", embedding=E[i])

        row(f"add, {k(n_mid)}-item {kind}", ms(add_one, repeat))
        if kind == "memory":  # the store's own work alone, no SQLite: what its lock would slow most
            q = turns(repeat, seed=97)[1]
            it = iter(range(10**9))
            row(
                f"retrieve top-10 of {k(n_mid)}, memory",
                ms(lambda st=st, q=q, it=it: st.retrieve(query_embedding=q[next(it) % repeat], k=10), repeat),
            )
        st.close()

    # consolidate: 10k -> 5k, and a session end in the steady state, on fresh copies of one file
    base = fill(MemoryStore(merge_threshold=None), n_mid, seed=2)
    base.save(folder / "mid.npz")
    half, steady = [], []
    for r in range(max(3, repeat // 40)):
        st = MemoryStore.load(folder / "mid.npz").persist(folder / f"half{r}.db")
        t0 = time.perf_counter()
        st.consolidate(n_mid // 2)
        half.append(1e3 * (time.perf_counter() - t0))
        st.close()
        st = MemoryStore.load(folder / "mid.npz")
        st.merge_threshold = None
        fill(st, 20, seed=100 + r, start_time=20.0)
        st.persist(folder / f"steady{r}.db")
        t0 = time.perf_counter()
        st.consolidate(n_mid)
        steady.append(1e3 * (time.perf_counter() - t0))
        st.close()
    row(f"consolidate {k(n_mid)} -> {k(n_mid // 2)}, file", half)
    row(f"consolidate {k(n_mid)} + 20 -> {k(n_mid)}, file", steady)
    mem = MemoryStore.load(folder / "mid.npz")
    t0 = time.perf_counter()
    mem.consolidate(n_mid // 2)
    row(f"consolidate {k(n_mid)} -> {k(n_mid // 2)}, memory", [1e3 * (time.perf_counter() - t0)])

    # the big store: build in memory, write once, reopen
    t0 = time.perf_counter()
    big = fill(MemoryStore(merge_threshold=None), n_big, seed=3)
    build = time.perf_counter() - t0
    path = folder / "big.db"
    t0 = time.perf_counter()
    big.persist(path)
    write = time.perf_counter() - t0
    big.close()
    opens = []
    for _ in range(3):
        t0 = time.perf_counter()
        st = MemoryStore.open(path)
        opens.append(time.perf_counter() - t0)
        st.close()
    row(f"open a {k(n_big)}-item file", opens, "s")
    st = MemoryStore.open(path)
    q = turns(repeat, seed=7)[1]
    it = iter(range(10**9))
    row(
        f"retrieve top-10 of {k(n_big)}, file",
        ms(lambda: st.retrieve(query_embedding=q[next(it) % repeat], k=10), repeat),
    )
    no_update = ms(lambda: st.retrieve(query_embedding=q[next(it) % repeat], k=10, update=False), repeat)
    row(f"retrieve top-10 of {k(n_big)}, no update", no_update)
    # the floor of any exact search: one pass of a matrix-vector product over the vectors
    E, qf = st.embeddings, q[0].astype(np.float32)
    floor = ms(lambda: np.einsum("ij,j->i", E, qf), repeat)
    row(f"floor: one pass over {k(n_big)} vectors", floor)
    ratio = rows[-3]["p50"] / statistics.median(floor)
    rows.append({"operation": "retrieve (file) / floor", "p50": round(ratio, 2), "unit": "x"})
    st.close()
    st = MemoryStore.open(path, merge_threshold=0.95)  # built without the duplicate check; on for adds
    add_texts, add_E = turns(max(20, repeat // 5), seed=98)
    j = iter(range(10**9))

    def add_big():
        i = next(j)
        st.add(add_texts[i], time=1e3 + i, session="bench", embedding=add_E[i])

    row(f"add, {k(n_big)}-item file", ms(add_big, len(add_texts)))
    st.close()
    size = os.path.getsize(path) + sum(os.path.getsize(p) for p in folder.glob("big.db-*"))
    rows.append({"operation": "file bytes per item", "p50": round(size / n_big), "unit": "bytes"})
    rows.append({"operation": f"(build {k(n_big)} items by add, in memory)", "p50": round(build, 1), "unit": "s"})
    rows.append({"operation": f"(write {k(n_big)} items to a new file)", "p50": round(write, 1), "unit": "s"})
    return rows


SUBJECTS = ["I", "My sister", "My dog", "We", "My boss", "Our neighbour", "Ana"]
VERBS = ["went to", "talked about", "really enjoyed", "couldn't stand", "planned", "finally booked", "forgot"]
OBJECTS = [
    "the farmers market",
    "a trip to Lyon in May",
    "peanut butter cookies",
    "the new job at the bank",
    "the yoga class on Tuesdays",
    "the concert on Friday night",
    "that old film with the dancing robot",
]
ENDINGS = ["yesterday.", "last weekend!", "again today.", "- it was great.", "but I'm not sure about it.", "?"]


def user_turns(n: int) -> tuple[list[dict], str]:
    """``n`` user-like turns as :meth:`MemoryStore.add_many` takes them, and where they came from.

    LoCoMo's first ``n`` turns in order (text, speaker, session) when ``MEMLIB_DATA_DIR``
    is set, else short synthetic sentences; times advance by a minute and a half per turn.
    """
    if os.environ.get("MEMLIB_DATA_DIR"):
        from memlib import datasets

        t = datasets.load("locomo").turns.head(n)
        rows = zip(t["text"], t["speaker"], t["session"])
        out = [{"text": x, "time": i / 1000, "speaker": sp, "session": se} for i, (x, sp, se) in enumerate(rows)]
        if len(out) == n:
            return out, "locomo"
    rng = np.random.default_rng(13)
    parts = (SUBJECTS, VERBS, OBJECTS, ENDINGS)
    texts = [" ".join(str(rng.choice(p)) for p in parts).replace(" ?", "?") for _ in range(n)]
    return [{"text": x, "time": i / 1000, "session": f"s{i // 20}"} for i, x in enumerate(texts)], "synthetic"


def agent(n: int, repeat: int, singles: int, old_singles: int) -> dict:
    """The store in an agent loop: warm-up, first add, add_many against the bare model, single adds."""
    import sys

    from memlib.embeddings import SETTINGS, EmbeddingCache, embed_cached, load_model
    from memlib.store import MemoryStore

    turns, source = user_turns(n)
    texts = [t["text"] for t in turns]
    out = {"turns": n, "source": source, "mean_words": round(float(np.mean([len(x.split()) for x in texts])), 1)}
    assert "sentence_transformers" not in sys.modules, "the model must not be loaded before the warm-up"
    out["warm_up_s"] = round(MemoryStore.warm_up(), 3)
    st = MemoryStore()
    t0 = time.perf_counter()
    st.add(texts[0], time=0.0)
    out["first_add_after_warm_up_ms"] = round(1e3 * (time.perf_counter() - t0), 2)

    import torch

    model = load_model(SETTINGS["fast"])
    kw = {"batch_size": 64, "convert_to_numpy": True, "normalize_embeddings": True, "show_progress_bar": False}
    bare, batch = [], []
    for _ in range(repeat):  # interleaved, so that a change of load hits both alike
        t0 = time.perf_counter()
        model.encode(texts, **kw)
        bare.append(time.perf_counter() - t0)
        st = MemoryStore()
        t0 = time.perf_counter()
        ids = st.add_many(turns)
        batch.append(time.perf_counter() - t0)
    out["bare_encode_s"] = round(statistics.median(bare), 3)
    out["add_many_s"] = round(statistics.median(batch), 3)
    out["add_many_over_bare"] = round(statistics.median(batch) / statistics.median(bare), 3)
    out["add_many_over_bare_per_round"] = [round(b / a, 3) for a, b in zip(bare, batch)]
    out["target_ratio"] = 1.2
    out["meets"] = bool(out["add_many_over_bare"] <= 1.2)
    out["add_many_items_kept"] = len(st)
    out["add_many_merged"] = len(ids) - len(st)

    def single_adds(store, count):
        samples = []
        for turn in turns[: count + 1]:
            t0 = time.perf_counter()
            store.add(**turn)
            samples.append(1e3 * (time.perf_counter() - t0))
        return samples[1:]  # the first call excluded

    s = single_adds(MemoryStore(), singles)
    out["single_add_p50_ms"] = round(statistics.median(s), 2)
    out["single_add_p90_ms"] = round(float(np.percentile(s, 90)), 2)
    out["single_add_n"] = len(s)
    with tempfile.TemporaryDirectory() as folder:
        cache = EmbeddingCache(folder, max_seq_length=256)
        s = single_adds(MemoryStore(embedder=lambda t: embed_cached(t, cache=cache, progress=False)), old_singles)
    out["old_path_single_add_p50_ms"] = round(statistics.median(s), 2)
    out["old_path_single_add_p90_ms"] = round(float(np.percentile(s, 90)), 2)
    out["old_path_single_add_n"] = len(s)
    out["torch_threads"] = torch.get_num_threads()
    out["cores"] = os.cpu_count()
    out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    out["OMP_WAIT_POLICY"] = os.environ.get("OMP_WAIT_POLICY")
    return out


class _NoLock:
    """Stands in for a store's lock in :func:`lock_cost`: what the store would cost without one."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def lock_cost(n_items: int, repeat: int, blocks: int, folder: Path) -> dict:
    """What the store's lock costs one thread: add and retrieve with the lock and with a no-op in its place.

    One process, one store of ``n_items`` (in memory, then in a file): ``blocks``
    blocks of ``repeat`` adds and ``repeat`` retrievals each, the lock on and off in
    turn (ABBA), so that load and the store's growth hit both alike. Returns each
    operation's median with and without the lock and their ratio.
    """
    from memlib.store import MemoryStore

    out = {"items": n_items, "samples_per_case": repeat * blocks // 2}
    n_adds = repeat * blocks
    texts, E = turns(n_adds, seed=99)
    Q = turns(n_adds, seed=97)[1]
    for kind in ("memory", "file"):
        st = fill(MemoryStore(merge_threshold=None), n_items, seed=1)
        st.merge_threshold = 0.95
        if kind == "file":
            st.persist(folder / "lock.db")
        real = st._lock
        samples = {(op, on): [] for op in ("add", "retrieve") for on in (True, False)}
        i = 0
        for b in range(blocks):
            on = (b % 4) in (0, 3)
            st._lock = real if on else _NoLock()
            for _ in range(repeat):
                t0 = time.perf_counter()
                st.add(texts[i], time=10.0 + i / 1e4, session="bench", embedding=E[i])
                samples["add", on].append(1e3 * (time.perf_counter() - t0))
                t0 = time.perf_counter()
                st.retrieve(query_embedding=Q[i], k=10)
                samples["retrieve", on].append(1e3 * (time.perf_counter() - t0))
                i += 1
        st._lock = real
        st.close()
        for op in ("add", "retrieve"):
            with_lock, without = statistics.median(samples[op, True]), statistics.median(samples[op, False])
            out[f"{op}, {kind}"] = {
                "with_lock_ms": round(with_lock, 4),
                "without_ms": round(without, 4),
                "ratio": round(with_lock / without, 4),
            }
    return out


def session_turns(n: int, n_sessions: int, seed: int, restate: float = 0.3):
    """``n`` synthetic turns over ``n_sessions`` sessions of near-equal length, user and assistant in turn.

    A share ``restate`` of the user turns after the first session restate a turn of an earlier
    session (a near copy of its embedding: cosine about 0.9), at a lag in sessions that falls as a
    power law (Pareto, shape 1): what a user who comes back to last week's topics leaves. Returns
    the texts, the unit embeddings and the session of each turn.
    """
    texts, E = turns(n, seed)
    rng = np.random.default_rng(seed + 1)
    session = np.arange(n) * n_sessions // n
    starts = np.searchsorted(session, np.arange(n_sessions))
    for i in range(0, n, 2):
        if session[i] == 0 or rng.random() >= restate:
            continue
        back = session[i] - min(int(session[i]), int(rng.pareto(1.0)) + 1)
        j = rng.integers(starts[back], starts[back + 1])
        e = E[j] + 0.5 * rng.normal(size=E.shape[1]).astype(np.float32) / np.sqrt(E.shape[1])
        E[i] = e / np.linalg.norm(e)
    return texts, E, session


def adaptive_cost(n_items: int, n_sessions: int, pairs: int, folder: Path) -> dict:
    """Consolidating a durable store of ``n_items`` under the value policy and the adaptive one, paired.

    The store is built in memory from :func:`session_turns`: ``n_sessions`` sessions of ``n_items``
    turns, each consolidated at its end to ``n_items`` (nothing goes, the need is counted), then one
    more session of the same length, left open. Each pair reopens that store into a fresh file per
    policy (ABBA order) and times one consolidation: to ``n_items`` (a session end) and to half.
    """
    from memlib.store import MemoryStore, make_policy
    from memlib.store.forget import references_since

    per = n_items // n_sessions
    texts, E, session = session_turns(n_items + per, n_sessions + 1, seed=4)
    base = MemoryStore(merge_threshold=None, policy=make_policy("value"))
    t0 = time.perf_counter()
    for i in range(len(texts)):
        base.add(
            texts[i],
            role="user" if i % 2 == 0 else "assistant",
            time=float(session[i]) + (i % per) / 1e3,  # a session a day
            session=f"s{session[i]}",
            embedding=E[i],
            emotion=0.3,
        )
        if i + 1 < len(texts) and session[i + 1] != session[i]:
            base.consolidate(n_items)
    build = time.perf_counter() - t0
    need = base.view.need
    base.save(folder / "sessions.npz")
    counting = ms(lambda: references_since(base.view, len(texts)), 20)
    last = references_since(base.view, len(texts))
    cases = {f"{k(n_items)} + {per} -> {k(b)}": b for b in (n_items, n_items // 2)}
    names = ("value", "adaptive")
    times = {(c, p): [] for c in cases for p in names}
    dropped = {}
    for r in range(pairs):
        for name in names if r % 2 == 0 else names[::-1]:
            for c, budget in cases.items():
                st = MemoryStore.load(folder / "sessions.npz", policy=make_policy(name))
                st.persist(folder / f"{name}-{r}-{budget}.db")
                t0 = time.perf_counter()
                dropped[c, name] = set(st.consolidate(budget))
                times[c, name].append(1e3 * (time.perf_counter() - t0))
                st.close()
    rows = []
    for c in cases:
        value, adaptive = times[c, "value"], times[c, "adaptive"]
        ratio = statistics.median(a / v for v, a in zip(value, adaptive))
        rows.append(
            {
                "consolidate, file": c,
                "value_p50_ms": round(statistics.median(value), 1),
                "adaptive_p50_ms": round(statistics.median(adaptive), 1),
                "adaptive_over_value": round(ratio, 2),
                "per_pair": [round(a / v, 2) for v, a in zip(value, adaptive)],
                "target": 2.0,
                "meets": bool(ratio <= 2.0),
                "dropped_differently": len(dropped[c, "value"] ^ dropped[c, "adaptive"]) // 2,
            }
        )
    return {
        "items": len(texts),
        "sessions": n_sessions + 1,
        "pairs": pairs,
        "build_s": round(build, 1),
        "references_counted": int(last.refs.sum()),
        "references_of_last_session": int(last.refs.sum() - need.refs.sum()),
        "need_exponent_b": last.exponent(make_policy("adaptive").z),
        "count_references_p50_ms": round(statistics.median(counting), 1),
        "rows": rows,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cores": os.cpu_count(),
    }


def print_adaptive(out: dict) -> None:
    """Print :func:`adaptive_cost`'s figures as a table."""
    import memlib

    load = ", ".join(f"{x:.1f}" for x in out["load_average"])
    print(f"memlib from {Path(memlib.__file__).parent}; {out['cores']} cores, load average {load}")
    print(
        f"{out['items']} items over {out['sessions']} sessions (built in {out['build_s']} s); "
        f"{out['references_counted']} references counted, {out['references_of_last_session']} by the session "
        f"that ends now; need exponent b = {out['need_exponent_b']}"
    )
    print(f"{'consolidate, file':24} {'value':>9} {'adaptive':>9} {'ratio':>6} {'target':>7}  meets  differ")
    for r in out["rows"]:
        print(
            f"{r['consolidate, file']:24} {r['value_p50_ms']:>7} ms {r['adaptive_p50_ms']:>6} ms "
            f"{r['adaptive_over_value']:>6} {r['target']:>7}  {'yes' if r['meets'] else 'NO':5}  "
            f"{r['dropped_differently']:>6}"
        )
    print(f"(ratio: median of {out['pairs']} paired ratios; differ: items one policy drops and the other keeps)")
    print(f"of which counting the session's references, both policies: {out['count_references_p50_ms']} ms (p50)")


def compare(against: str, rounds: int, argv: list[str]) -> dict:
    """The speed table of the memlib in the folder ``against`` and of this tree, ``rounds`` times each, alternately.

    Each run is a fresh process (``PYTHONPATH`` picks the memlib), old and new in
    turn (ABBA order), so that a change of load hits both alike. Returns, per
    operation, the median of the runs' p50 for each, and their ratio new / old.
    """
    import subprocess
    import sys

    here = str(Path(__file__).resolve().parents[1])
    trees = {"old": str(Path(against).resolve()), "new": here}
    for label, root in trees.items():
        env = dict(os.environ, PYTHONPATH=root)
        where = subprocess.run(  # (from "/", as the runs below: the current folder is not on their path)
            [sys.executable, "-c", "import memlib; print(memlib.__file__)"],
            env=env,
            capture_output=True,
            text=True,
            cwd="/",
        ).stdout.strip()
        if not where.startswith(root):
            raise SystemExit(f"--against: the {label} run would import memlib from {where}, not from {root}")
    runs = {"old": [], "new": []}
    for r in range(rounds):
        for label in ("old", "new") if r % 2 == 0 else ("new", "old"):
            env = dict(os.environ, PYTHONPATH=trees[label])
            out = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--json", *argv],
                env=env,
                capture_output=True,
                text=True,
                check=True,
                cwd="/",
            )
            runs[label].append({row["operation"]: row for row in json.loads(out.stdout)})
    table = []
    for op, first in runs["new"][0].items():
        if op not in runs["old"][0] or first.get("unit") not in ("ms", "s"):
            continue
        old = statistics.median(run[op]["p50"] for run in runs["old"])
        new = statistics.median(run[op]["p50"] for run in runs["new"])
        per_round = [round(n[op]["p50"] / o[op]["p50"], 3) for o, n in zip(runs["old"], runs["new"])]
        table.append(
            {
                "operation": op,
                "unit": first["unit"],
                "old_p50": old,
                "new_p50": new,
                "new_over_old": round(new / old, 3),
            }
            | {"per_round": per_round}
        )
    return {"against": trees["old"], "this_tree": here, "rounds": rounds, "args": argv, "rows": table}


def print_table(rows: list[dict]) -> None:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} cores, load average {load} (other processes slow every figure alike)")
    print(f"{'operation':40} {'p50':>10} {'p90':>10} {'unit':>5} {'target':>7}  meets")
    print("-" * 83)
    for r in rows:
        p90 = "" if r.get("p90") is None else r["p90"]
        target = "" if r.get("target") is None else r["target"]
        meets = "" if r.get("meets") is None else ("yes" if r["meets"] else "NO")
        print(f"{r['operation']:40} {r['p50']:>10} {p90:>10} {r['unit']:>5} {target:>7}  {meets}")


def replay(dataset: str, budget_share: float) -> dict:
    """Replay every history of a dataset through in-memory stores; the store's size against its budget."""
    from memlib.embeddings import embed_cached
    from memlib.factors import emotional_intensity
    from memlib.store import MemoryStore, ValuePolicy
    from memlib.studies import DataSpec

    ds = DataSpec(dataset).load_dataset()
    usable = ds.usable()
    histories = {}
    for c, hay in enumerate(usable.cases["haystack"]):
        histories.setdefault(hay, c)
    E = embed_cached(ds.turns["text"].tolist(), progress=False)  # from the cache
    emotion = emotional_intensity(ds.turns["text"].tolist())

    sizes = []
    t0 = time.perf_counter()
    for c in histories.values():
        rows = usable.haystack_rows(c)
        budget = int(np.ceil(budget_share * len(rows)))
        st = MemoryStore(policy=ValuePolicy())
        turns_ = ds.turns
        ts = (turns_["timestamp"].to_numpy()[rows] - np.datetime64("1970-01-01")) / np.timedelta64(1, "D")
        sess = turns_["session"].to_numpy()[rows]
        peak, peak_bytes = 0, 0
        for i, r in enumerate(rows):
            st.add(
                turns_["text"].iat[r],
                role=turns_["role"].iat[r],
                time=float(ts[i]),
                speaker=turns_["speaker"].iat[r],
                session=sess[i],
                embedding=E[r],
                emotion=float(emotion[r]),
            )
            if i == len(rows) - 1 or sess[i + 1] != sess[i]:
                if len(st) > peak:
                    peak = len(st)
                    peak_bytes = st.embeddings.nbytes + st.factors.nbytes + 5 * 8 * len(st)
                st.consolidate(budget)
        sizes.append(
            {
                "history": len(rows),
                "budget": budget,
                "peak_items": peak,
                "final_items": len(st),
                "peak_bytes": peak_bytes,
                "merges": len(st.merges),
            }
        )
    seconds = time.perf_counter() - t0
    s = {k: [d[k] for d in sizes] for k in sizes[0]}
    return {
        "dataset": dataset,
        "histories": len(histories),
        "turns_replayed": int(sum(s["history"])),
        "budget_share": budget_share,
        "replay_seconds": round(seconds, 2),
        "turns_per_second": round(sum(s["history"]) / seconds, 1),
        "max_history": max(s["history"]),
        "max_budget": max(s["budget"]),
        "max_peak_items": max(s["peak_items"]),
        "max_final_items": max(s["final_items"]),
        "peak_items_over_budget_max": round(max(p / b for p, b in zip(s["peak_items"], s["budget"])), 2),
        "max_peak_bytes": max(s["peak_bytes"]),
        "merged_turns": int(sum(s["merges"])),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--items", type=int, default=100_000, help="items of the big store (retrieve, open)")
    p.add_argument("--mid", type=int, default=10_000, help="items of the store for add and consolidate")
    p.add_argument("--repeat", type=int, default=200, help="timed repetitions of add and retrieve")
    p.add_argument("--json", action="store_true", help="print the table as JSON rows")
    p.add_argument("--replay", action="store_true", help="replay a dataset instead of the speed table")
    p.add_argument("--dataset", default="locomo")
    p.add_argument("--budget", type=float, default=0.3)
    p.add_argument("--agent", action="store_true", help="time the store in an agent loop instead (issue 13)")
    p.add_argument("--turns", type=int, default=1000, help="turns of --agent")
    p.add_argument("--agent-repeat", type=int, default=3, help="rounds of bare encoding and add_many")
    p.add_argument("--singles", type=int, default=100, help="timed single adds (after a first, untimed one)")
    p.add_argument("--old-singles", type=int, default=30, help="the same through the old cached embedding path")
    p.add_argument("--against", metavar="FOLDER", help="compare the speed table with the memlib in FOLDER (old code)")
    p.add_argument("--rounds", type=int, default=3, help="runs of each tree for --against, alternated")
    p.add_argument("--adaptive", action="store_true", help="consolidation under the value and adaptive policies")
    p.add_argument("--sessions", type=int, default=200, help="sessions of the --adaptive store")
    p.add_argument("--pairs", type=int, default=9, help="paired rounds of --adaptive")
    p.add_argument("--lock-cost", action="store_true", help="time add and retrieve with the store's lock and without")
    p.add_argument("--blocks", type=int, default=40, help="blocks of --repeat operations for --lock-cost")
    args = p.parse_args()
    if args.lock_cost:
        with tempfile.TemporaryDirectory() as folder:
            print(json.dumps(lock_cost(args.mid, max(1, args.repeat // 8), args.blocks, Path(folder)), indent=1))
        return
    if args.adaptive:
        with tempfile.TemporaryDirectory() as folder:
            out = adaptive_cost(args.mid, args.sessions, args.pairs, Path(folder))
        if args.json:
            print(json.dumps(out, indent=1))
        else:
            print_adaptive(out)
        return
    if args.against:
        argv = ["--items", str(args.items), "--mid", str(args.mid), "--repeat", str(args.repeat)]
        print(json.dumps(compare(args.against, args.rounds, argv), indent=1))
        return
    if args.replay:
        print(json.dumps(replay(args.dataset, args.budget), indent=1))
        return
    if args.agent:
        print(json.dumps(agent(args.turns, args.agent_repeat, args.singles, args.old_singles), indent=1))
        return
    with tempfile.TemporaryDirectory() as folder:
        rows = speed_table(args.items, args.mid, args.repeat, Path(folder))
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print_table(rows)


if __name__ == "__main__":
    main()
