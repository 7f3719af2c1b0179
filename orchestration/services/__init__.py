"""Local servers kprio starts, watches and stops for its users: the embedded Kafka broker
(``kprio broker``) and a long-lived Spark Connect server (``kprio spark``).

Process supervision lives here, not in kprio_core: the core stays pure Python with no
processes of its own.
"""
