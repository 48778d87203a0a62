"""The example pipeline: a GRPO run on a local Ray cluster shaped like a real one, instrumented end to end.

``python -m rlsight.demo`` (``make demo``, ``rlsight demo``) starts Ray with rlsight's
runtime_env, trains a tiny numpy policy for 20 steps of a few seconds across generation
workers, data-parallel policy ranks, a reference worker and an aiohttp environment service,
writes the run folder, and prints ``rlsight report`` for it. The numpy work is real; what each
phase *costs* is shaped like an LLM run's (``costs``). Modules:

* ``run``: the driver and the command line;
* ``controllers``: the sync and async single controllers (replay buffer, staleness);
* ``fleet``: starting the actors and the phases the controllers share;
* ``actors``: the generation workers, policy ranks and reference worker;
* ``costs``: the cost model (tokens / decode rate, tokens trained, parameter bytes);
* ``faults``: ``--inject`` faults (straggler, hang, kill, env-errors);
* ``env_service``: the environment service that scores completions over HTTP;
* ``prompts``: the prompt loader the driver waits on;
* ``policy``: the numpy model and GRPO maths;
* ``engine_metrics``: the generation worker's vLLM-named Prometheus series;
* ``metrics``: the trainer scalars declared as a metric group.

Importing it imports Ray and numpy; ``import rlsight`` never does. Before it imports Ray it
sets Ray's single-machine switch (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` unless already set,
:mod:`rlsight.demo._loopback`), so a cluster the demo starts listens on 127.0.0.1 only.
"""

from __future__ import annotations

from rlsight.demo._loopback import prefer_loopback

prefer_loopback()  # before Ray is first imported: Ray reads the switch once

from rlsight.demo.costs import Costs  # noqa: E402
from rlsight.demo.faults import Faults, parse_faults  # noqa: E402
from rlsight.demo.run import (  # noqa: E402
    DEFAULT_SPAN_GROUPS,
    DEFAULT_STEPS,
    DemoSettings,
    build_parser,
    main,
    run_demo,
)

__all__ = [
    "DEFAULT_SPAN_GROUPS",
    "DEFAULT_STEPS",
    "Costs",
    "DemoSettings",
    "Faults",
    "build_parser",
    "main",
    "parse_faults",
    "run_demo",
]
