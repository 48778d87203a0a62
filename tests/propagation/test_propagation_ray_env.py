"""rlsight.ray without a cluster: the runtime_env it builds, actor options, class wiring."""

from __future__ import annotations

import inspect
import os
import warnings
from typing import Any

import pytest

from rlsight import ConfigError, RlsightWarning, TelemetryConfig
from rlsight.errors import reset_warn_once
from rlsight.propagation import TRACE_CONTEXT_KWARG
from rlsight.ray import ray_runtime_env, traced_actor, worker_options
from rlsight.runtime import active_runtime

_CONFIG = TelemetryConfig(run_id="env-test", run_dir="/tmp/rlsight-env-test", span_groups=("all",))
_CALLS: list[str] = []


def user_hook() -> None:
    """A user's own worker_process_setup_hook (module level, so it can be named by string)."""
    _CALLS.append("user")


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    _CALLS.clear()


def test_runtime_env_projects_the_config_into_env_vars() -> None:
    env = ray_runtime_env(_CONFIG)
    assert env["env_vars"] == _CONFIG.to_env()
    assert TelemetryConfig.from_env(env["env_vars"]) == _CONFIG


def test_runtime_env_installs_a_named_setup_hook() -> None:
    hook = ray_runtime_env(_CONFIG)["worker_process_setup_hook"]
    assert callable(hook)
    assert hook.__name__ == "rlsight_worker_setup"


def test_runtime_env_keeps_the_users_env_vars_and_fields() -> None:
    base: dict[str, Any] = {"env_vars": {"MY_VAR": "1"}, "pip": ["numpy"]}
    env = ray_runtime_env(_CONFIG, base)
    assert env["env_vars"]["MY_VAR"] == "1"
    assert env["pip"] == ["numpy"]
    assert base == {"env_vars": {"MY_VAR": "1"}, "pip": ["numpy"]}


def test_config_projection_wins_over_a_stale_rlsight_var_in_base() -> None:
    env = ray_runtime_env(_CONFIG, {"env_vars": {"RLSIGHT_RUN_ID": "stale"}})
    assert env["env_vars"]["RLSIGHT_RUN_ID"] == "env-test"


@pytest.mark.parametrize("chained", [user_hook, f"{__name__}.user_hook"], ids=["callable", "name"])
def test_the_users_setup_hook_runs_after_rlsight(monkeypatch: pytest.MonkeyPatch, chained: object) -> None:
    # The worker's projection says "off" (the driver's config explicitly says "on").
    monkeypatch.setenv("RLSIGHT_ENABLED", "false")
    config = _CONFIG.with_changes(enabled=True)
    hook = ray_runtime_env(config, {"worker_process_setup_hook": chained})["worker_process_setup_hook"]
    hook()
    assert _CALLS == ["user"]


def test_building_the_runtime_env_twice_chains_the_users_hook_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLSIGHT_ENABLED", "false")
    config = _CONFIG.with_changes(enabled=True)
    once = ray_runtime_env(config, {"worker_process_setup_hook": user_hook})
    twice = ray_runtime_env(config, once)
    twice["worker_process_setup_hook"]()
    assert _CALLS == ["user"]


def test_a_disabled_config_installs_no_hook_but_keeps_the_users() -> None:
    disabled = _CONFIG.with_changes(enabled=False)
    assert "worker_process_setup_hook" not in ray_runtime_env(disabled)
    env = ray_runtime_env(disabled, {"worker_process_setup_hook": user_hook})
    assert env["worker_process_setup_hook"] is user_hook
    assert env["env_vars"]["RLSIGHT_ENABLED"] == "false"


def test_the_setup_hook_survives_pickling_by_ray() -> None:
    from ray import cloudpickle

    hook = ray_runtime_env(_CONFIG, {"worker_process_setup_hook": user_hook})["worker_process_setup_hook"]
    assert cloudpickle.loads(cloudpickle.dumps(hook)).chained is user_hook


def test_a_failing_setup_warns_once_and_the_worker_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in _CONFIG.to_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("RLSIGHT_RANK", "not-a-number")
    hook = ray_runtime_env(_CONFIG, {"worker_process_setup_hook": user_hook})["worker_process_setup_hook"]
    reset_warn_once()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        hook()
        hook()
    ours = [w for w in seen if issubclass(w.category, RlsightWarning)]
    assert len(ours) == 1
    assert "RLSIGHT_RANK" in str(ours[0].message)
    assert active_runtime() is None
    assert _CALLS == ["user", "user"]


# -- worker_options ------------------------------------------------------------------------

def test_worker_options_carry_the_identity_as_env_vars() -> None:
    opts = worker_options(worker_group="policy", rank=1, world_size=4, devices=8)
    assert opts == {"runtime_env": {"env_vars": {
        "RLSIGHT_WORKER_GROUP": "policy", "RLSIGHT_RANK": "1",
        "RLSIGHT_WORLD_SIZE": "4", "RLSIGHT_DEVICES": "8",
    }}}


def test_worker_options_merge_into_the_actors_own_runtime_env() -> None:
    opts = worker_options(worker_group="gen", runtime_env={"env_vars": {"X": "1"}, "pip": ["a"]})
    assert opts["runtime_env"] == {"env_vars": {"X": "1", "RLSIGHT_WORKER_GROUP": "gen"}, "pip": ["a"]}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"worker_group": ""}, "worker_group"),
        ({"worker_group": "a/b"}, "without '/'"),
        ({"worker_group": "g", "rank": -1}, "rank"),
        ({"worker_group": "g", "world_size": 0}, "world_size"),
        ({"worker_group": "g", "devices": True}, "devices"),
        ({"worker_group": "g", "rank": 2, "world_size": 2}, "below world_size"),
    ],
)
def test_worker_options_reject_bad_identities(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        worker_options(**kwargs)


# -- traced_actor --------------------------------------------------------------------------

class _Base:
    def inherited(self) -> int:
        return 1


class _Actor(_Base):
    def __init__(self, size: int, *, name: str = "a") -> None:
        self.size = size

    def public(self, x: int) -> int:
        return x

    def _private(self) -> None: ...

    @staticmethod
    def static() -> int:
        return 2

    @classmethod
    def klass(cls) -> int:
        return 3

    @property
    def prop(self) -> int:
        return 4


_Traced = traced_actor(_Actor)


@pytest.mark.parametrize("name", ["public", "inherited"])
def test_traced_actor_makes_public_methods_accept_the_carrier(name: str) -> None:
    method = getattr(_Traced, name)
    assert TRACE_CONTEXT_KWARG in inspect.signature(inspect.unwrap(method)).parameters


@pytest.mark.parametrize("name", ["_private", "static", "klass"])
def test_traced_actor_leaves_private_static_and_class_methods_alone(name: str) -> None:
    assert TRACE_CONTEXT_KWARG not in inspect.signature(inspect.unwrap(getattr(_Traced, name))).parameters


def test_traced_actor_leaves_the_base_class_alone() -> None:
    assert TRACE_CONTEXT_KWARG not in inspect.signature(_Base.inherited).parameters


def test_traced_actor_keeps_the_constructor_signature_ray_validates() -> None:
    params = inspect.signature(inspect.unwrap(_Traced.__init__)).parameters
    assert list(params) == ["self", "size", "name"]
    instance = _Traced(3, name="b")
    assert (instance.size, instance.public(5), instance.prop) == (3, 5, 4)


def test_ray_accepts_a_traced_actor_without_its_own_init() -> None:
    """Ray writes __signature__ on inspect.unwrap(__init__): it must not reach object.__init__."""
    import ray

    @traced_actor
    class NoInit:
        def work(self) -> int:
            return 1

    ray.remote(NoInit)
    assert inspect.unwrap(NoInit.__init__) is NoInit.__init__


def test_ray_accepts_a_traced_actor_with_its_own_init() -> None:
    import ray

    @traced_actor
    class WithInit:
        def __init__(self, size: int) -> None:
            self.size = size

        async def work(self) -> int:
            return self.size

    ray.remote(WithInit)
    assert list(inspect.signature(inspect.unwrap(WithInit.__init__)).parameters)[:2] == ["self", "size"]


def test_traced_actor_on_a_non_class_names_the_order_to_use() -> None:
    with pytest.raises(TypeError, match=r"below @ray\.remote"):
        traced_actor(object())  # type: ignore[type-var]


def test_rlsight_ray_imports_without_ray() -> None:
    import subprocess
    import sys

    code = "import sys, rlsight.ray, rlsight.propagation, rlsight.http; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONWARNINGS": "error"})
    assert out.stdout.strip() == "False"



def test_an_otel_only_endpoint_reaches_the_workers_projection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers on another node do not inherit the driver's shell: project the resolved value (#18.1)."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "trainer")
    env = ray_runtime_env(TelemetryConfig(run_id="r", run_dir="/tmp/r"))["env_vars"]
    assert env["RLSIGHT_OTLP_ENDPOINT"] == "http://collector:4318"
    assert env["RLSIGHT_SERVICE_NAME"] == "trainer"


def test_rlsight_variables_of_the_driver_reach_the_projection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLSIGHT_SPAN_GROUPS", "minimal")
    env = ray_runtime_env(TelemetryConfig(run_id="r", run_dir="/tmp/r"))["env_vars"]
    assert env["RLSIGHT_SPAN_GROUPS"] == "minimal"
