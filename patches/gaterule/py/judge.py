# arpatch gate judge, Python side: imports the patched tree's gate modules
# as Python resolves them from the tree's python/ directory (a package
# that shadows a module counts, and so does every package __init__ on the
# way), with torch, NVML and the rest stubbed (stubs.py), and asks what
# they admit on a PCIe-only host of WS GPUs: does SGLang's custom
# allreduce come up enabled, which sizes does should_custom_ar admit, and
# does custom_all_reduce hand them to sgl-kernel's all_reduce.
#
# It reads the tree from arpatch through two pipes: on fd 3 it writes
# "read PATH" (PATH tree-relative) and reads the answer on fd 4: "F N"
# and N bytes, "D" (a directory) or "N" (nothing there). The plan comes on
# stdin as JSON; the answer goes to fd 3 as one line "result JSON".
import builtins
import importlib
import importlib.abc
import importlib.machinery
import io
import json
import os
import posix
import shutil
import stat
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stubs  # noqa: E402
import gates  # noqa: E402

del sys.path[0]

TREE = "/arpatch-tree/"
requests = os.fdopen(3, "wb", buffering=0)
answers = os.fdopen(4, "rb", buffering=0)
cache = {}
code_cache = {}
misses = []  # paths read since the last prefetch


def read(path):
    """The tree's file at path: bytes, "dir", or None."""
    if path in cache:
        return cache[path]
    misses.append(path)
    requests.write(b"read " + path.encode("utf-8", "surrogateescape") + b"\n")
    head = answers.readline().split()
    got = None
    if head[0] == b"F":
        n, buf = int(head[1]), b""
        while len(buf) < n:
            buf += answers.read(n - len(buf))
        got = buf
    elif head[0] == b"D":
        got = "dir"
    cache[path] = got
    return got


def tree_path(p):
    """The tree-relative path of a path under TREE, else None."""
    if isinstance(p, bytes):
        p = p.decode("utf-8", "surrogateescape")
    if not isinstance(p, str):
        try:
            p = os.fspath(p)
        except TypeError:
            return None
    if p == TREE[:-1]:
        return ""
    if p.startswith(TREE):
        return p[len(TREE):].rstrip("/")
    return None


def install_tree_fs():
    """os.stat, os.lstat and open() see the tree under TREE: its files,
    and its directories where arpatch can tell them."""
    real_stat, real_lstat, real_open = os.stat, os.lstat, builtins.open

    def result(rel):
        got = "dir" if rel == "" else read(rel)
        if got is None:
            raise FileNotFoundError(2, "No such file or directory", TREE + rel)
        if got == "dir":
            return os.stat_result((stat.S_IFDIR | 0o755, 1, 1, 2, 0, 0, 4096, 0, 0, 0))
        return os.stat_result((stat.S_IFREG | 0o644, 1, 1, 1, 0, 0, len(got), 0, 0, 0))

    def vstat(p, *a, **kw):
        rel = tree_path(p)
        return real_stat(p, *a, **kw) if rel is None else result(rel)

    def vlstat(p, *a, **kw):
        rel = tree_path(p)
        return real_lstat(p, *a, **kw) if rel is None else result(rel)

    def vopen(f, mode="r", *a, **kw):
        rel = tree_path(f) if not isinstance(f, int) else None
        if rel is None:
            return real_open(f, mode, *a, **kw)
        if any(c in mode for c in "wax+"):
            raise PermissionError(13, "the arpatch gate judge reads the tree only", TREE + rel)
        got = read(rel)
        if not isinstance(got, bytes):
            raise (IsADirectoryError if got == "dir" else FileNotFoundError)(2, "not a file", TREE + rel)
        buf = io.BytesIO(got)
        return buf if "b" in mode else io.TextIOWrapper(buf, encoding=kw.get("encoding") or "utf-8")

    os.stat, os.lstat, builtins.open = vstat, vlstat, vopen


def code_of(path, src):
    key = (path, src)
    if key not in code_cache:
        code_cache[key] = compile(src, TREE + path, "exec", dont_inherit=True)
    return code_cache[key]


class Tree:
    """What a worker needs of the tree: the paths its children read that
    it has not, and a way to read and compile those before the next."""

    @staticmethod
    def take_misses():
        out = list(misses)
        misses.clear()
        return out

    @staticmethod
    def prefetch(paths):
        for p in paths:
            got = read(p)
            if isinstance(got, bytes) and p.endswith(".py"):
                try:
                    code_of(p, got)
                except SyntaxError:
                    pass
        misses.clear()


class TreeLoader(importlib.abc.Loader):
    def __init__(self, path):
        self.path = path

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__arpatch_tree__ = True
        exec(code_of(self.path, read(self.path)), module.__dict__)


class NamespaceLoader(importlib.abc.Loader):
    """A namespace package of the tree, marked as the tree's."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__arpatch_tree__ = True


class TreeFinder(importlib.abc.MetaPathFinder):
    """The tree's python/ directory, searched as FileFinder searches a
    directory: a package (NAME/__init__.py) before a module (NAME.py),
    a directory without __init__.py as a namespace portion."""

    def find_spec(self, fullname, path=None, target=None):
        if path is None:
            if fullname in getattr(sys, "stdlib_module_names", ()) or fullname in sys.builtin_module_names:
                return None
            dirs = ["python"]
        else:
            dirs = [p[len(TREE):] for p in path if isinstance(p, str) and p.startswith(TREE)]
        name = fullname.rpartition(".")[2]
        portions = []
        for d in dirs:
            base = d + "/" + name
            if isinstance(read(base + "/__init__.py"), bytes):
                spec = importlib.machinery.ModuleSpec(fullname, TreeLoader(base + "/__init__.py"), is_package=True)
                spec.origin, spec.has_location = TREE + base + "/__init__.py", True
                spec.submodule_search_locations = [TREE + base]
                return spec
            if isinstance(read(base + ".py"), bytes):
                spec = importlib.machinery.ModuleSpec(fullname, TreeLoader(base + ".py"))
                spec.origin, spec.has_location = TREE + base + ".py", True
                return spec
            if read(base) == "dir":
                portions.append(TREE + base)
        if portions:
            spec = importlib.machinery.ModuleSpec(fullname, NamespaceLoader(), is_package=True)
            spec.submodule_search_locations = portions
            return spec
        return None


NOT_DRIVEN = {"HOME", "PATH", "TMPDIR", "USER", "LOGNAME", "CUDA_VISIBLE_DEVICES", "RANK", "LOCAL_RANK",
              "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PYTHONPATH"}


class Environ(dict):
    """os.environ that notes what the tree's code reads: every variable
    (reads, for telling which environments behave alike), and the ones
    read while a gate decides (construction and calls) or by a file the
    series changes (seen, the variables to drive). scanned holds the files
    whose code lists the environment."""

    seen = []
    reads = set()
    scanned = set()
    gate_phase = False
    changed = set()

    def note(self, k):
        f = sys._getframe(2)
        for _ in range(3):
            if f is None:
                return
            name = f.f_code.co_filename
            if name.startswith(TREE):
                if k is None:
                    Environ.scanned.add(name[len(TREE):])
                    return
                Environ.reads.add(k)
                if (Environ.gate_phase or name[len(TREE):] in Environ.changed) and isinstance(k, str) and (
                        k not in Environ.seen and k not in NOT_DRIVEN):
                    Environ.seen.append(k)
                return
            f = f.f_back

    def __getitem__(self, k):
        self.note(k)
        return dict.__getitem__(self, k)

    def get(self, k, d=None):
        self.note(k)
        return dict.get(self, k, d)

    def __contains__(self, k):
        self.note(k)
        return dict.__contains__(self, k)

    def keys(self):
        self.note(None)
        return dict.keys(self)

    def items(self):
        self.note(None)
        return dict.items(self)

    def values(self):
        self.note(None)
        return dict.values(self)

    def __iter__(self):
        self.note(None)
        return dict.__iter__(self)

    def copy(self):
        self.note(None)
        return dict(dict.items(self))


class EnvironB(object):
    """os.environb (and posix.environ) as bytes views of the one Environ,
    so that a variable read as bytes is noted and driven like any other."""

    def __init__(self, env):
        self.env = env

    @staticmethod
    def _s(k):
        return k.decode("utf-8", "surrogateescape") if isinstance(k, bytes) else k

    @staticmethod
    def _b(v):
        return v.encode("utf-8", "surrogateescape") if isinstance(v, str) else v

    def __getitem__(self, k):
        return self._b(self.env[self._s(k)])

    def get(self, k, d=None):
        v = self.env.get(self._s(k))
        return d if v is None else self._b(v)

    def __contains__(self, k):
        return self._s(k) in self.env

    def keys(self):
        return [self._b(k) for k in self.env.keys()]

    def items(self):
        return [(self._b(k), self._b(v)) for k, v in self.env.items()]

    def values(self):
        return [self._b(v) for v in self.env.values()]

    def __iter__(self):
        return iter(self.keys())

    def __len__(self):
        return len(self.env)

    def copy(self):
        return dict(self.items())


def seed_home(home, sizes):
    for ws in sizes:
        d = os.path.join(home, ".cache", "sglang")
        os.makedirs(d, exist_ok=True)
        ids = ",".join(str(i) for i in range(ws))
        with open(os.path.join(d, "gpu_p2p_access_cache_for_%s.json" % ids), "w") as f:
            json.dump({"%d->%d" % (i, j): True for i in range(ws) for j in range(ws)}, f)


def main():
    plan = json.load(sys.stdin)
    sys.stdout = sys.stderr  # the tree's prints never reach arpatch
    home = tempfile.mkdtemp(prefix="arpatch-gate-judge-")
    seed_home(home, plan["ws"])
    stubs.install_host()
    install_tree_fs()
    env = Environ()
    os.environ = env
    os.environb = EnvironB(env)
    posix.environ = os.environb
    os.getenv = lambda k, d=None: env.get(k, d)
    sys.meta_path.insert(0, TreeFinder())
    sys.meta_path.append(stubs.StubFinder())
    Environ.changed = set(plan.get("changed", []))
    workers = {}

    def run(sc):
        out = []
        for ws in plan["ws"]:
            if ws not in workers:
                workers[ws] = gates.Worker(plan, ws, env, home, Tree)
            res = workers[ws].run(sc)
            for n in res.pop("seen", []):
                if n not in Environ.seen:
                    Environ.seen.append(n)
            out.append(res)
        return out

    scenarios = gates.expand(plan, run, Environ.seen)
    for w in workers.values():
        w.close()
    shutil.rmtree(home, ignore_errors=True)
    requests.write(b"result " + json.dumps({"scenarios": scenarios, "names": Environ.seen}).encode() + b"\n")


if __name__ == "__main__":
    main()
