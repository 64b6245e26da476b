"""The daemon: Kafka in, predictions out, learning from labels and late feedback.

| module | what it holds |
|---|---|
| ``loop`` | :class:`Daemon`: poll, rebalance, the prequential step, checkpoints, ``run`` |
| ``prepare`` | decoding and featurizing a batch, in this process or a child one |
| ``feedback`` | the store that makes late labels and corrections idempotent |
| ``checkpoint`` | the atomic checkpoint file: state and input offsets together |
| ``kafka_io`` | everything that talks to Kafka (the only importer of ``kafka``) |
"""

from streamnb.daemon.loop import Daemon, PollWatchdog, add_arguments, build_daemon, main

__all__ = ["Daemon", "PollWatchdog", "add_arguments", "build_daemon", "main"]
