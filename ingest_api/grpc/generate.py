"""Regenerate ``ingest_api/grpc/v2/`` from the vendored ``.proto`` files (needs the dev extra).

    python -m ingest_api.grpc.generate          # rewrite the committed modules
    python -m ingest_api.grpc.generate --check  # exit 1 when they differ from a fresh generation

``protoc`` (from ``grpcio-tools``) writes ``apache/rocketmq/v2/*_pb2.py``, ``*_pb2.pyi`` and
``*_pb2_grpc.py`` into a scratch directory; their ``from apache.rocketmq.v2 import ...`` lines
are rewritten to ``from ingest_api.grpc.v2 import ...`` so the modules live inside this package
(the descriptors keep their proto names, ``apache/rocketmq/v2/definition.proto``). The output
depends on the ``grpcio-tools`` version: regenerate after changing its pin in pyproject.toml.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PROTO_ROOT = PACKAGE_DIR / "protos"
PROTO_PACKAGE = "apache/rocketmq/v2"
PROTO_FILES = ("definition.proto", "service.proto")
OUTPUT_DIR = PACKAGE_DIR / "v2"
#: The Python package protoc names (from the proto path) and the one the modules live in.
GENERATED_IMPORT = "from apache.rocketmq.v2 import"
VENDORED_IMPORT = "from ingest_api.grpc.v2 import"


class GenerationFailed(RuntimeError):
    """protoc refused the ``.proto`` files (its messages went to stderr)."""


def generate() -> dict[str, bytes]:
    """Run protoc on the vendored protos: file name -> contents of each generated module.

    Raises :class:`ModuleNotFoundError` without ``grpcio-tools`` and :class:`GenerationFailed`
    when protoc exits non-zero.
    """
    from importlib import resources

    from grpc_tools import protoc

    well_known = resources.files("grpc_tools") / "_proto"
    with tempfile.TemporaryDirectory() as scratch:
        args = [
            "protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--python_out={scratch}",
            f"--pyi_out={scratch}",
            f"--grpc_python_out={scratch}",
            *(f"{PROTO_ROOT / PROTO_PACKAGE / name}" for name in PROTO_FILES),
        ]
        code = protoc.main(args)
        if code != 0:
            raise GenerationFailed(f"protoc exited with {code} on {PROTO_FILES}")
        produced = Path(scratch) / PROTO_PACKAGE
        return {
            path.name: path.read_bytes().replace(GENERATED_IMPORT.encode(), VENDORED_IMPORT.encode())
            for path in sorted(produced.iterdir())
            if path.is_file()
        }


def committed() -> dict[str, bytes]:
    """The generated modules as committed (every file in ``v2/`` but ``__init__.py``)."""
    return {
        path.name: path.read_bytes()
        for path in sorted(OUTPUT_DIR.iterdir())
        if path.is_file() and path.name != "__init__.py" and "_pb2" in path.name
    }


def write(modules: dict[str, bytes]) -> None:
    """Replace the generated modules in ``v2/`` with ``modules`` (stale ones are removed)."""
    for name in committed().keys() - modules.keys():
        (OUTPUT_DIR / name).unlink()
    for name, contents in modules.items():
        (OUTPUT_DIR / name).write_bytes(contents)


def main(argv: list[str]) -> int:
    fresh = generate()
    if "--check" in argv:
        if fresh == committed():
            return 0
        print("ingest_api/grpc/v2 differs from a fresh generation: python -m ingest_api.grpc.generate")
        return 1
    write(fresh)
    print(f"wrote {', '.join(sorted(fresh))} to {OUTPUT_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
