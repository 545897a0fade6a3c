"""The roles of the :class:`~store.message_store.MessageStore` facade, one mixin each.

``MessageStore`` (in :mod:`store.message_store`, which owns the lifecycle: open, recover,
start the services, close) inherits them all; nothing else uses them. Import the store from
``store``, never from here.
"""
