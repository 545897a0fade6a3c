"""``python -m streaming.operators``: run the operator job (see :mod:`streaming.operators.runtime`)."""

from streaming.operators.runtime import main

raise SystemExit(main())
