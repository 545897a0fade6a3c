"""``python -m sparkmq.cli``: the same as the ``sparkmq`` command."""

from sparkmq.cli import main

main()
