"""Helpers shared by the test packages: waiting on conditions, free ports, store configs.

Import from the modules (``from tests.support.waiting import wait_until``); fixtures stay in
each package's ``conftest.py``.
"""
