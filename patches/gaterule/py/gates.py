# arpatch gate judge: what SGLang's gates admit at one world size. Each
# world size has a worker process that imports the tree's gate modules
# once, with no variable set, and forks a child per environment: the
# child sets the environment and runs the ranks, so no run sees another's
# state. An environment that sets a variable the import read by name, or
# that a file the series changes lists, is run on a fresh import instead
# (the child imports under it).
import importlib
import inspect
import json
import os
import sys
import threading
import traceback

import stubs

TREE = "/arpatch-tree/"
GATES = "sglang.srt.distributed.device_communicators."


def purge():
    for name, m in list(sys.modules.items()):
        if getattr(m, "__arpatch_tree__", False) or getattr(m, "__arpatch_stub__", False) or (
                m is None and not name.startswith("_")):
            del sys.modules[name]


def choose_class(car):
    """The class parallel_state constructs: dispatch_custom_allreduce's
    choice where the tree has it, else CustomAllreduce."""
    pick = getattr(car, "dispatch_custom_allreduce", None)
    if pick is None:
        return car.CustomAllreduce
    params = inspect.signature(pick).parameters
    kw = {k: v for k, v in (("group", sys.modules["torch.distributed"].ProcessGroup()),
                            ("device", stubs.device("cuda", stubs.rank()))) if k in params}
    return pick(**kw)


def where(e):
    for fr in reversed(traceback.extract_tb(e.__traceback__)):
        return "%s:%d" % (fr.filename.replace(TREE, ""), fr.lineno)
    return ""


def raised(e):
    return "raise: %s: %s" % (type(e).__name__, e)


def one_rank(r, plan, out, car):
    """Rank r constructs the class and asks it about every probe size."""
    stubs.world.rank = r
    res = {"rank": r}
    out[r] = res
    try:
        cls = choose_class(car)
        res["class"] = getattr(cls, "__qualname__", None) or getattr(getattr(cls, "func", None), "__qualname__", repr(cls))
        res["legacy"] = cls is car.CustomAllreduce
        obj = cls(group=sys.modules["torch.distributed"].ProcessGroup(), device=stubs.device("cuda", r))
    except Exception as e:
        res["init"], res["where"] = raised(e), where(e)
        stubs.group_state["barrier"].abort()
        return
    res["init"] = "ok"
    res["enabled"] = not getattr(obj, "disabled", True)
    res["max_size"] = getattr(obj, "max_size", None)
    admit, reduced = [], []
    for n in plan["probes"]:
        t = stubs.Tensor(None, n // 2, stubs.DTYPES["bfloat16"], stubs.device("cuda", r))
        try:
            ok = bool(res["enabled"] and obj.should_custom_ar(t))
        except Exception as e:
            ok = raised(e)
        admit.append(ok)
        red = None
        if ok is True and hasattr(obj, "custom_all_reduce"):
            try:
                got = obj.custom_all_reduce(t)
                red = got is not None and getattr(got, "reduced_by", None) is not None
            except Exception as e:
                red = raised(e)
        reduced.append(red)
    res["admit"], res["reduced"] = admit, reduced
    res["kernel_init"] = stubs.group_state.get("calls", {}).get(r, {}).get("init")


def expand_value(v, ws):
    """"{islands2}": two islands of equal size at world size ws."""
    if v != "{islands2}":
        return v
    h = ws // 2
    return ",".join(map(str, range(h))) + "/" + ",".join(map(str, range(h, ws)))


def set_env(env, home, sc, ws):
    env.clear()
    env.update({k: expand_value(v, ws) for k, v in sc.items()}, HOME=home)


def reset_group(ws):
    stubs.group_state.clear()
    stubs.group_state.update(ws=ws, barrier=threading.Barrier(ws, timeout=30), slots=[None] * ws, calls={})


def import_gates():
    """Imports the gate modules as parallel_state does; the
    custom_all_reduce module, or the import's error."""
    try:
        importlib.import_module("sglang.srt.distributed.parallel_state")
        car = importlib.import_module(GATES + "custom_all_reduce")
        importlib.import_module(GATES + "custom_all_reduce_utils")
        return car, None
    except BaseException as e:
        return None, {"import": "%s: %s" % (type(e).__name__, e), "where": where(e)}


def run_ranks(plan, ws, car, env_cls):
    out = [None] * ws
    env_cls.gate_phase = True
    threads = [threading.Thread(target=one_rank, args=(r, plan, out, car), daemon=True) for r in range(ws)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    env_cls.gate_phase = False
    return out


class Worker:
    """The process that judges one world size (see the file's doc)."""

    def __init__(self, plan, ws, env, home, tree):
        self.ws, self.tree = ws, tree
        cmd_r, self.cmd_w = os.pipe()
        self.res_r, res_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(self.cmd_w)
            os.close(self.res_r)
            try:
                self.serve(plan, env, home, os.fdopen(cmd_r, "rb"), res_w)
            finally:
                os._exit(0)
        self.pid = pid
        os.close(cmd_r)
        os.close(res_w)
        self.results = os.fdopen(self.res_r, "rb")

    def run(self, sc):
        os.write(self.cmd_w, json.dumps(sc).encode() + b"\n")
        line = self.results.readline()
        if not line:
            return {"ws": self.ws, "import": "the judge's worker for world size %d ended" % self.ws, "where": ""}
        return json.loads(line)

    def close(self):
        # An explicit stop: the other workers, forked later, hold this
        # pipe's write end too, so it never reads an end of file.
        os.write(self.cmd_w, b"null\n")
        os.close(self.cmd_w)
        os.waitpid(self.pid, 0)

    def serve(self, plan, env, home, cmds, res_w):
        env_cls = type(env)
        set_env(env, home, {}, self.ws)
        reset_group(self.ws)
        env_cls.reads, env_cls.scanned = set(), set()
        car, err = import_gates()
        # A listing of the environment by a file the series changes may act
        # on any variable; one by upstream's own files (environ.py's rewrite
        # of the legacy SGL_ prefix) is taken not to act on those the judge
        # sets, so that their runs need no import of their own.
        imp_reads, imp_scan = set(env_cls.reads), bool(env_cls.scanned & env_cls.changed)
        for line in cmds:
            sc = json.loads(line)
            if sc is None:
                return
            fresh = err is not None or imp_scan or any(k in imp_reads for k in sc)
            os.write(res_w, self.child(plan, env, home, sc, car if not fresh else None) + b"\n")

    def child(self, plan, env, home, sc, car):
        """Runs sc in a forked child and returns its answer, one JSON line."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            out = {"ws": self.ws}
            try:
                env_cls = type(env)
                set_env(env, home, sc, self.ws)
                reset_group(self.ws)
                err = None
                if car is None:
                    purge()
                    car, err = import_gates()
                if err:
                    out.update(err)
                else:
                    out["ranks"] = run_ranks(plan, self.ws, car, env_cls)
                out["seen"] = env_cls.seen
                out["misses"] = self.tree.take_misses()
                data = json.dumps(out).encode()
            except BaseException as e:
                data = json.dumps({"ws": self.ws, "import": "the judge failed: " + raised(e), "where": where(e)}).encode()
            while data:
                data = data[os.write(w, data):]
            os._exit(0)
        os.close(w)
        chunks = []
        with os.fdopen(r, "rb") as f:
            chunks.append(f.read())
        _, status = os.waitpid(pid, 0)
        data = b"".join(chunks)
        if not data:
            return json.dumps({"ws": self.ws, "import": "the judge's rank process ended (status %d)" % status, "where": ""}).encode()
        out = json.loads(data)
        self.tree.prefetch(out.pop("misses", []))  # the next child finds them read and compiled
        return json.dumps(out).encode()


def admits(results):
    """Whether a scenario's results admit custom allreduce above 2 GPUs."""
    for w in results:
        if w["ws"] > 2:
            for r in w.get("ranks") or []:
                if r and r.get("enabled") and any(a is True for a in r.get("admit", [])):
                    return True
    return False


def expand(plan, run, seen):
    """Runs the scenarios: no variable set; each variable the gates read
    (or the plan names) set alone to each of its values; and each setting
    that opened the gates above 2 GPUs with every other variable set too.
    seen is the list of variables the gates read, growing as they run."""
    done, order = {}, []

    def once(env):
        key = tuple(sorted(env.items()))
        if key not in done and len(order) < plan["max_scenarios"]:
            done[key] = run(env)
            order.append(env)

    def values(n):
        return plan["values"].get(n, plan["default_values"])

    once({})
    for _ in range(2):  # a value may open a path that reads another variable
        for n in list(dict.fromkeys(seen + plan["extra_names"])):
            for v in values(n):
                once({n: v})
    openers = [e for e in order if e and admits(done[tuple(sorted(e.items()))])]
    for o in openers:
        for n in list(dict.fromkeys(seen + plan["extra_names"])):
            if n not in o:
                for v in values(n):
                    once(dict(o, **{n: v}))
    return [{"env": e, "results": done[tuple(sorted(e.items()))]} for e in order]
