"""The daemon: Kafka in, predictions out, learning from labels and late feedback.

| module | what it holds |
|---|---|
| ``loop`` | :class:`Daemon`: start-up, poll, rebalance, following remote slices, ``run`` |
| ``processor`` | one batch of records -> predictions, learning, feedback, dead letters |
| ``commit`` | the commit protocol: one transaction (outputs, changed state, offsets) |
| ``prepare`` | decoding and featurizing a batch, in this process or a child one |
| ``partitions`` | every input partition's slice (owned or remote) and the global model |
| ``changelog`` | a slice as changelog records of full values, and back |
| ``feedback`` | the store that makes late labels and corrections idempotent |
| ``watchdog`` | the bound on Kafka calls that wait without one |
| ``kafka_io`` | everything that talks to Kafka (the only importer of ``kafka``) |
"""

from streamnb.daemon.loop import Daemon, add_arguments, build_daemon, main
from streamnb.daemon.watchdog import Watchdog

__all__ = ["Daemon", "Watchdog", "add_arguments", "build_daemon", "main"]
