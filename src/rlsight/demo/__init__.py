"""The example pipeline: a short, real GRPO run on a local Ray cluster, instrumented end to end.

``python -m rlsight.demo`` (``make demo``, ``rlsight demo``) starts Ray with rlsight's
runtime_env, runs a few GRPO steps of a tiny numpy policy across a generation worker, a
policy worker and an aiohttp environment service, writes the run folder, and prints
``rlsight report`` for it. Modules:

* ``run``: the driver (the single controller) and the command line;
* ``actors``: the generation and policy workers;
* ``env_service``: the environment service that scores completions over HTTP;
* ``prompts``: the prompt loader the driver waits on;
* ``policy``: the numpy model and GRPO maths;
* ``engine_metrics``: the generation worker's vLLM-named Prometheus series;
* ``metrics``: the trainer scalars declared as a metric group.

Importing it imports Ray and numpy; ``import rlsight`` never does.
"""

from __future__ import annotations

from rlsight.demo.run import DEFAULT_SPAN_GROUPS, DEFAULT_STEPS, main, run_demo

__all__ = ["DEFAULT_SPAN_GROUPS", "DEFAULT_STEPS", "main", "run_demo"]
