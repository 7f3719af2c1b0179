"""The ``kprio`` operator CLI: one module per command group, assembled in :mod:`.main`."""
