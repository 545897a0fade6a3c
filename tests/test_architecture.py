"""The layout's rules, checked on the import statements of every module (``ast``, no imports run).

* Layers: ``store`` imports none of the others; ``cluster`` (membership, routes, the
  ZooKeeper session) sits on ``store``; the broker core (``broker``) sits on both; the doors
  (``ingest_api``) sit on the core, and Spark (``streaming``) on ``store`` and ``cluster``;
  neither imports the other or the CLI; only ``sparkmq.cli`` sits on top (``import sparkmq``
  for its ``__version__`` is allowed).
* The core speaks no protocol: ``broker`` imports no web framework (FastAPI, Starlette,
  uvicorn, pydantic). A door is an adapter: no door (``ingest_api.http``, ``.kafka``,
  ``.console``, ``.remoting``, ``.grpc``) imports another; what two web doors share sits beside
  them (``ingest_api.params``), and ``ingest_api.app`` / ``ingest_api.server`` put the web doors
  on one port.
* Only ``cluster.zk`` talks to ZooKeeper: nothing else imports kazoo.
* Inside ``store``: the structures below the facade (``format``, ``io``, ``commitlog``,
  ``consumequeue``, ``index``, ``metadata``) never import the put/read/recovery layers, the
  facade or ``publish``; nothing but ``publish`` imports ``publish``, nothing but ``ha`` imports
  ``ha`` (replication drives the facade, the facade never calls it).
* No import cycles between the packages of ``store``.
* The doors, Spark and the CLI use the store's public API only: ``store`` (the facade and its
  types), ``store.publish`` (the exactly-once services) and ``store.ha`` (replication: the
  cluster layer drives it), never a module inside them.
* The house is tidy: no import cycle between files anywhere in the project's packages, and no
  module over 600 lines.

An import is any ``import`` statement in the file, at the top or inside a function (a deferred
import is still a dependency), and inside ``if TYPE_CHECKING:`` too (two files that name each
other's types know each other: declare a Protocol below both instead). ``from pkg import
name`` imports the module ``pkg.name`` when there is one, else ``pkg``; importing a module does
not count as importing its parent packages' ``__init__``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = ("store", "cluster", "broker", "ingest_api", "streaming", "sparkmq")
#: Every package of the project.
PACKAGES = TOP
MAX_MODULE_LINES = 600
#: The doors: sub-packages of ``ingest_api`` that adapt one protocol each to the core.
DOORS = ("http", "kafka", "console", "remoting", "grpc")
#: What the core may not import: it speaks no protocol.
WEB_FRAMEWORKS = ("fastapi", "starlette", "uvicorn", "pydantic")
STRUCTURES = ("format", "io", "commitlog", "consumequeue", "index", "metadata")
ABOVE_STRUCTURES = ("write", "read", "recovery", "publish", "ha", "facade", "message_store")
#: Packages above the facade: only they import themselves.
ABOVE_FACADE = ("publish", "ha")


def module_files(packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> its file, for every module of ``packages`` (absent ones skipped)."""
    out: dict[str, Path] = {}
    for top in packages:
        for path in sorted((ROOT / top).rglob("*.py")):
            out[".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")] = path
    return out


def module_imports(third_party: bool = False, packages: tuple[str, ...] = TOP) -> dict[str, set[str]]:
    """Dotted module name -> absolute module names it imports (only this project's, unless
    ``third_party``), for the modules of ``packages``. ``from pkg import name`` counts as
    importing ``pkg.name`` when that is a module of the project, else ``pkg``."""
    known = module_files()
    out: dict[str, set[str]] = {}
    for name, path in module_files(packages).items():
        is_package = path.name == "__init__.py"
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(name, is_package, node.module, node.level)
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    found.add(submodule if submodule in known else base)
        out[name] = found if third_party else {m for m in found if m.split(".")[0] in PACKAGES}
    return out


def _absolute(importer: str, is_package: bool, module: str | None, level: int) -> str:
    """The absolute name ``from <level dots><module> import ...`` in ``importer`` refers to."""
    if level == 0:
        return module or ""
    parts = importer.split(".")
    parent = parts if is_package else parts[:-1]
    base = parent[: len(parent) - (level - 1)]
    return ".".join([*base, module] if module else base)


def test_only_the_zookeeper_adapter_imports_kazoo() -> None:
    bad = [
        f"{module} imports {imported}"
        for module, imports in module_imports(third_party=True).items()
        for imported in imports
        if imported.split(".")[0] == "kazoo" and module != "cluster.zk"
    ]
    assert bad == [], "\n".join(sorted(bad))


def test_layers_never_import_upwards() -> None:
    bad = []
    for module, imports in module_imports().items():
        top = module.split(".")[0]
        for imported in imports:
            target = imported.split(".")[0]
            if target == top or imported == "sparkmq":
                continue
            allowed = {
                "store": (),
                "cluster": ("store",),
                "broker": ("store", "cluster"),
                "ingest_api": ("store", "cluster", "broker"),
                "streaming": ("store", "cluster"),
                "sparkmq": ("store", "cluster", "broker", "ingest_api", "streaming"),
            }[top]
            if target not in allowed:
                bad.append(f"{module} imports {imported}")
    assert bad == [], "\n".join(sorted(bad))


def test_the_core_imports_no_web_framework() -> None:
    bad = [
        f"{module} imports {imported}: the broker core speaks no protocol; decode and encode in a door"
        for module, imports in module_imports(third_party=True).items()
        if module.split(".")[0] == "broker"
        for imported in imports
        if imported.split(".")[0] in WEB_FRAMEWORKS
    ]
    assert bad == [], "\n".join(sorted(bad))


def test_no_door_imports_another() -> None:
    bad = []
    for module, imports in module_imports().items():
        parts = module.split(".")
        if parts[0] != "ingest_api" or len(parts) < 2 or parts[1] not in DOORS:
            continue
        for imported in imports:
            target = imported.split(".")
            if target[0] == "ingest_api" and len(target) > 1 and target[1] in DOORS and target[1] != parts[1]:
                bad.append(
                    f"{module} imports {imported}: a door calls the broker core (broker), never another "
                    "door; move what both need into broker/ (or beside the web doors: ingest_api.params)"
                )
    assert bad == [], "\n".join(sorted(bad))


def test_store_structures_sit_below_the_put_and_read_paths() -> None:
    bad = []
    for module, imports in module_imports().items():
        parts = module.split(".")
        if parts[0] != "store" or len(parts) < 2:
            continue
        for imported in imports:
            target = imported.split(".")
            if target[0] != "store" or len(target) < 2:
                continue
            if parts[1] in STRUCTURES and target[1] in ABOVE_STRUCTURES:
                bad.append(f"{module} imports {imported}")
            if target[1] in ABOVE_FACADE and parts[1] != target[1]:
                bad.append(f"{module} imports {imported} ({target[1]} sits above the facade)")
    assert bad == [], "\n".join(sorted(bad))


def test_no_cycles_between_store_packages() -> None:
    edges: defaultdict[str, set[str]] = defaultdict(set)
    for module, imports in module_imports().items():
        parts = module.split(".")
        if parts[0] != "store" or len(parts) < 3:
            continue  # the facade and root modules tie the packages together
        for imported in imports:
            target = imported.split(".")
            if target[0] == "store" and len(target) >= 3 and target[1] != parts[1]:
                edges[parts[1]].add(target[1])

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in edges.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    cycles = sorted(p for p in list(edges) if reaches(p, p, {p}))
    assert cycles == [], f"store packages in an import cycle: {cycles} ({dict(edges)})"


def test_callers_use_the_public_store_api_only() -> None:
    public = {"store", "store.publish", "store.ha"}
    bad = [
        f"{module} imports {imported}"
        for module, imports in module_imports().items()
        if module.split(".")[0] != "store"
        for imported in imports
        if imported.split(".")[0] == "store" and imported not in public
    ]
    assert bad == [], "\n".join(sorted(bad))


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle through every module that is in one, each starting at its smallest
    name, sorted (strongly connected components by Tarjan, then a breadth-first search)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(edges):
        if node not in index:
            connect(node)
    cycles: set[tuple[str, ...]] = set()
    for component in components:
        for start in sorted(component):
            came_from: dict[str, str] = {}
            queue = [start]
            while queue and start not in came_from:
                node = queue.pop(0)
                for nxt in sorted(edges[node] & component):
                    if nxt not in came_from:
                        came_from[nxt] = node
                        queue.append(nxt)
            path, node = [start], came_from[start]
            while node != start:
                path.append(node)
                node = came_from[node]
            path.reverse()  # start -> ... -> the module that imports start
            first = path.index(min(path))
            cycles.add(tuple(path[first:] + path[:first]))
    return sorted(list(cycle) for cycle in cycles)


def test_no_import_cycles_between_files() -> None:
    files = module_files()
    edges = {
        module: {imported for imported in imports if imported in files and imported != module}
        for module, imports in module_imports(packages=PACKAGES).items()
    }
    shown = [
        " -> ".join(str(files[m].relative_to(ROOT)) for m in [*cycle, cycle[0]]) for cycle in _cycles(edges)
    ]
    assert shown == [], (
        "import cycles between files (move the piece both need into a module below both):\n"
        + "\n".join(shown)
    )


#: Generated code, regenerated rather than edited (``python -m ingest_api.grpc.generate``).
GENERATED = ("ingest_api/grpc/v2/",)


def test_no_module_over_600_lines() -> None:
    long = []
    for path in module_files().values():
        if str(path.relative_to(ROOT)).startswith(GENERATED):
            continue
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert long == [], f"modules over {MAX_MODULE_LINES} lines (split them by role):\n" + "\n".join(long)
