"""The layout's rules, checked on the import statements of every module (``ast``, no imports run).

* Layers: ``store`` imports none of the others; ``cluster`` (membership, routes, the
  ZooKeeper session) sits on ``store``; ``broker`` (the broker core: services the doors share)
  sits on both; the doors (``ingest_api``) and Spark (``streaming``)
  sit on both and do not import each other or the CLI; only ``sparkmq.cli`` sits on top
  (``import sparkmq`` for its ``__version__`` is allowed).
* Only ``cluster.zk`` talks to ZooKeeper: nothing else imports kazoo.
* Inside ``store``: the structures below the facade (``format``, ``io``, ``commitlog``,
  ``consumequeue``, ``index``, ``metadata``) never import the put/read/recovery layers, the
  facade or ``publish``; nothing but ``publish`` imports ``publish``, nothing but ``ha`` imports
  ``ha`` (replication drives the facade, the facade never calls it).
* No import cycles between the packages of ``store``.
* The doors, Spark and the CLI use the store's public API only: ``store`` (the facade and its
  types), ``store.publish`` (the exactly-once services) and ``store.ha`` (replication: the
  cluster layer drives it), never a module inside them.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = ("store", "cluster", "broker", "ingest_api", "streaming", "sparkmq")
STRUCTURES = ("format", "io", "commitlog", "consumequeue", "index", "metadata")
ABOVE_STRUCTURES = ("write", "read", "recovery", "publish", "ha", "message_store")
#: Packages above the facade: only they import themselves.
ABOVE_FACADE = ("publish", "ha")


def module_imports(third_party: bool = False) -> dict[str, set[str]]:
    """Dotted module name -> absolute module names it imports (only this project's, unless
    ``third_party``)."""
    out: dict[str, set[str]] = {}
    for top in TOP:
        for path in (ROOT / top).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            found: set[str] = set()
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    found.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    found.add(node.module)
            out[name] = found if third_party else {m for m in found if m.split(".")[0] in TOP}
    return out


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
