"""Local servers kprio runs for its users: the embedded broker (``kprio broker``) and Spark Connect (``kprio spark``).

Process supervision lives here, not in kprio_core: the core stays pure Python with no processes of its own.
"""
