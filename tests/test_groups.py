"""Span-group registry, presets, spec resolution and the gate (rlsight.groups).

The registry is process-global and only grows, so every test registers namespaces and groups
under fresh names (``_fresh``) and restores the process's spec afterwards.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsight.buckets import Bucket
from rlsight.errors import RlsightWarning, SpanGroupError
from rlsight.groups import (
    ALL,
    SpanGroup,
    is_span_group_enabled,
    register_span_groups,
    registered_groups,
    registered_presets,
    resolve_span_group_spec,
    set_span_group_spec,
)
from rlsight.runtime import active_runtime
from rlsight.testing import capture_telemetry, isolated_registries

_RL_PRODUCTIVE = {"generation", "reward", "training", "optimizer"}
_RL_OVERHEAD = {"logprob", "refit", "checkpoint", "validation", "data_plane"}
_RL_UMBRELLAS = {"job", "step", "startup", "setup", "rollout"}
_RL_UNBUCKETED = {"efficiency", "per_prompt", "engine"}
_RL_ALL = _RL_PRODUCTIVE | _RL_OVERHEAD | _RL_UMBRELLAS | _RL_UNBUCKETED


def _fresh(prefix: str = "g") -> str:
    """A name no other test (or hypothesis example) has registered."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def _register_fresh(n: int = 1, *, namespace: str | None = None) -> tuple[str, list[str]]:
    namespace = namespace or _fresh("ns")
    names = [_fresh() for _ in range(n)]
    register_span_groups(namespace, [SpanGroup(name, "test group") for name in names])
    return namespace, names


@pytest.fixture(autouse=True)
def _restore_registry() -> Iterator[None]:
    """Put the registry and spec back, so nothing registered or set here leaks into another test."""
    with isolated_registries():
        yield


# -- the rl namespace -------------------------------------------------------------------------


class TestRlNamespace:
    def test_rl_namespace_registers_exactly_the_documented_groups(self) -> None:
        owned = {name for name, (ns, _) in registered_groups().items() if ns == "rl"}
        assert owned == _RL_ALL

    @pytest.mark.parametrize(
        ("names", "bucket"),
        [(_RL_PRODUCTIVE, Bucket.PRODUCTIVE), (_RL_OVERHEAD, Bucket.OVERHEAD)],
    )
    def test_leaf_groups_carry_their_design_bucket(self, names: set[str], bucket: Bucket) -> None:
        for name in names:
            assert registered_groups()[name][1].bucket is bucket

    def test_umbrella_groups_are_umbrellas_without_bucket(self) -> None:
        for name in _RL_UMBRELLAS:
            group = registered_groups()[name][1]
            assert group.umbrella and group.bucket is None

    def test_efficiency_per_prompt_and_engine_have_no_group_bucket(self) -> None:
        for name in _RL_UNBUCKETED:
            group = registered_groups()[name][1]
            assert group.bucket is None and not group.umbrella

    def test_per_step_preset_is_everything_but_per_prompt_and_engine(self) -> None:
        assert resolve_span_group_spec(["per_step"]).enabled == _RL_ALL - {"per_prompt", "engine"}

    def test_minimal_preset_is_job_step_startup_setup_efficiency(self) -> None:
        assert resolve_span_group_spec(["minimal"]).enabled == {
            "job", "step", "startup", "setup", "efficiency"
        }

    def test_presets_are_listed_with_their_namespace(self) -> None:
        presets = registered_presets()
        assert presets["per_step"][0] == "rl"
        assert set(presets["minimal"][1]) == {"job", "step", "startup", "setup", "efficiency"}


# -- resolution properties -------------------------------------------------------------------

_KNOWN_NAMES = sorted(_RL_ALL | {"per_step", "minimal", "rl", ALL})
_spec_names = st.lists(
    st.one_of(
        st.sampled_from(_KNOWN_NAMES),
        st.text(alphabet="abcdefghijklmnopqrstuvwxyz_. ", min_size=1, max_size=12),
    ),
    max_size=8,
)


def _resolvable(name: str) -> bool:
    return (
        name == ALL
        or name in registered_groups()
        or name in registered_presets()
        or name in {ns for ns, _ in registered_groups().values()}
    )


class TestResolutionProperties:
    @given(extra=st.integers(min_value=0, max_value=3))
    @settings(max_examples=15, deadline=None)
    def test_all_equals_the_live_registry(self, extra: int) -> None:
        """`all` is a wildcard over what is registered when it is resolved, not a snapshot."""
        before = resolve_span_group_spec([ALL])
        _register_fresh(extra)
        after = resolve_span_group_spec([ALL])
        assert after.enabled == set(registered_groups())
        assert before.enabled <= after.enabled
        assert after.pending == ()

    @given(spec=_spec_names)
    @settings(max_examples=200, deadline=None)
    def test_every_name_is_resolved_or_pending_never_dropped(self, spec: list[str]) -> None:
        resolution = resolve_span_group_spec(spec)
        names = [s.strip() for s in spec if s.strip()]
        for name in names:
            assert _resolvable(name) != (name in resolution.pending), name
        for name in names:
            if name in registered_groups():
                assert name in resolution.enabled
        assert resolution.enabled <= set(registered_groups())

    @given(spec=_spec_names, data=st.data())
    @settings(max_examples=100, deadline=None)
    def test_order_of_names_does_not_matter(self, spec: list[str], data: st.DataObject) -> None:
        shuffled = data.draw(st.permutations(spec))
        a, b = resolve_span_group_spec(spec), resolve_span_group_spec(shuffled)
        assert a.enabled == b.enabled
        assert set(a.pending) == set(b.pending)

    @given(spec=_spec_names)
    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    def test_setting_a_spec_with_pending_names_never_raises(self, spec: list[str]) -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            resolution = set_span_group_spec(spec)
        assert all(issubclass(w.category, RlsightWarning) for w in caught)
        names = {s.strip() for s in spec if s.strip()}
        assert set(resolution.pending) == {name for name in names if not _resolvable(name)}

    def test_comma_separated_string_spec_is_split(self) -> None:
        resolution = set_span_group_spec(" generation , reward ,")
        assert resolution.enabled == {"generation", "reward"}


# -- pending names ---------------------------------------------------------------------------


class TestPending:
    def test_pending_name_warns_naming_groups_presets_and_namespaces(self) -> None:
        name = _fresh("typo")
        with pytest.warns(RlsightWarning, match=name) as record:
            set_span_group_spec(["per_step", name])
        message = str(record[0].message)
        assert "registered groups: " in message and "generation" in message
        assert "presets: " in message and "per_step" in message and "minimal" in message
        assert "namespaces: " in message and "rl" in message

    def test_pending_name_near_a_registered_one_is_named_as_a_likely_typo(self) -> None:
        _, [group] = _register_fresh()
        typo = group[:-1]
        with pytest.warns(RlsightWarning, match=f"names '{typo}' \\(did you mean '{group}'\\?\\)"):
            set_span_group_spec(["per_step", typo])

    def test_pending_name_warns_only_once(self) -> None:
        name = _fresh("typo")
        with pytest.warns(RlsightWarning):
            set_span_group_spec([name])
        set_span_group_spec([name])  # a second warning would fail: warnings are errors here

    def test_pending_name_is_reported_in_the_resolution(self) -> None:
        name = _fresh("typo")
        with pytest.warns(RlsightWarning):
            resolution = set_span_group_spec(["minimal", name])
        assert resolution.pending == (name,)
        assert resolution.enabled == {"job", "step", "startup", "setup", "efficiency"}

    def test_pending_namespace_enables_its_groups_when_it_registers(self) -> None:
        namespace = _fresh("lib")
        with pytest.warns(RlsightWarning, match=namespace), capture_telemetry(span_groups=[namespace]):
            _, names = _register_fresh(2, namespace=namespace)
            assert all(is_span_group_enabled(n) for n in names)
            assert resolve_span_group_spec([namespace]).pending == ()

    def test_pending_group_name_is_enabled_when_registered_later(self) -> None:
        name = _fresh()
        with pytest.warns(RlsightWarning, match=name), capture_telemetry(span_groups=[name]):
            assert not is_span_group_enabled(name)
            register_span_groups(_fresh("lib"), [SpanGroup(name, "late")])
            assert is_span_group_enabled(name)

    def test_all_enables_groups_registered_after_setup(self) -> None:
        with capture_telemetry(span_groups=[ALL]):
            _, names = _register_fresh(1)
            assert is_span_group_enabled(names[0])

    def test_a_group_registered_later_stays_off_unless_the_spec_names_it(self) -> None:
        with capture_telemetry(span_groups=["per_step"]):
            _, names = _register_fresh(1)
            assert not is_span_group_enabled(names[0])


# -- the gate --------------------------------------------------------------------------------


class TestGate:
    def test_gate_is_off_when_no_runtime_is_set_up(self) -> None:
        assert active_runtime() is None
        set_span_group_spec([ALL])
        assert not is_span_group_enabled("generation")

    def test_gate_follows_the_spec_while_set_up(self) -> None:
        with capture_telemetry(span_groups=["minimal"]):
            assert is_span_group_enabled("step")
            assert not is_span_group_enabled("generation")

    def test_gate_turns_off_when_the_capture_ends(self) -> None:
        with capture_telemetry(span_groups=[ALL]):
            assert is_span_group_enabled("generation")
        assert not is_span_group_enabled("generation")

    def test_unknown_group_is_not_enabled(self) -> None:
        with capture_telemetry(span_groups=[ALL]):
            assert not is_span_group_enabled(_fresh("unknown"))

    @given(specs=st.lists(st.lists(st.sampled_from([ALL, "per_step", "minimal", *sorted(_RL_ALL)]),
                                   max_size=4), min_size=1, max_size=4))
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    def test_span_helpers_follow_every_spec_change(self, specs: list[list[str]]) -> None:
        """span() binds the gate's off-set once: the gate must update that set, never rebind it."""
        from rlsight import record_span, span, umbrella_span
        from rlsight._span_manager import NOOP

        groups = sorted(_RL_ALL - {"efficiency"})  # span(RL.EFFICIENCY) warns by design
        expected_records = 0
        with capture_telemetry(span_groups=["minimal"]) as capture:
            for spec in specs:
                enabled = set_span_group_spec(spec).enabled
                for group in groups:
                    assert (span(group, "rl.test.gate") is NOOP) == (group not in enabled)
                    assert (umbrella_span(group, "rl.test.gate") is NOOP) == (group not in enabled)
                record_span("generation", "rl.test.gate_record", 1.7e9, 1.7e9 + 1)
                expected_records += "generation" in enabled
                assert capture.span_names().count("rl.test.gate_record") == expected_records
        for group in groups:
            assert span(group, "rl.test.gate") is NOOP


# -- registration ----------------------------------------------------------------------------


class TestRegistration:
    def test_registering_the_identical_definition_twice_is_a_no_op(self) -> None:
        namespace = _fresh("ns")
        group = SpanGroup(_fresh(), "same")
        register_span_groups(namespace, [group])
        register_span_groups(namespace, [group])
        assert registered_groups()[group.name] == (namespace, group)

    def test_group_owned_by_another_namespace_is_an_error(self) -> None:
        owner, (name,) = _register_fresh(1)
        with pytest.raises(SpanGroupError, match=f"{name!r} is already registered by namespace {owner!r}"):
            register_span_groups(_fresh("other"), [SpanGroup(name, "test group")])

    def test_different_definition_in_the_same_namespace_is_an_error(self) -> None:
        namespace, (name,) = _register_fresh(1)
        with pytest.raises(SpanGroupError, match="different definition"):
            register_span_groups(namespace, [SpanGroup(name, "test group", Bucket.IDLE)])

    def test_group_named_like_an_existing_preset_is_an_error(self) -> None:
        """A group named `per_step` would silently replace the preset in every spec."""
        with pytest.raises(SpanGroupError, match="per_step"):
            register_span_groups(_fresh("ns"), [SpanGroup("per_step", "shadow")])
        assert resolve_span_group_spec(["per_step"]).enabled == _RL_ALL - {"per_prompt", "engine"}

    def test_group_named_like_a_namespace_is_an_error(self) -> None:
        namespace, _ = _register_fresh(1)
        with pytest.raises(SpanGroupError, match=namespace):
            register_span_groups(_fresh("ns"), [SpanGroup(namespace, "shadow")])

    def test_namespace_named_like_a_group_is_an_error(self) -> None:
        with pytest.raises(SpanGroupError, match="generation"):
            register_span_groups("generation", [SpanGroup(_fresh(), "x")])

    def test_preset_named_like_a_namespace_is_an_error(self) -> None:
        namespace, (name,) = _register_fresh(1)
        with pytest.raises(SpanGroupError, match="clashes"):
            register_span_groups(_fresh("ns"), [], presets={namespace: [name]})

    def test_failed_registration_registers_nothing(self) -> None:
        owner, (taken,) = _register_fresh(1)
        new = _fresh()
        namespace = _fresh("ns")
        with pytest.raises(SpanGroupError):
            register_span_groups(namespace, [SpanGroup(new, "ok"), SpanGroup(taken, "clash")])
        assert new not in registered_groups()
        assert registered_groups()[taken][0] == owner

    def test_group_named_all_is_reserved(self) -> None:
        with pytest.raises(SpanGroupError, match="reserved"):
            SpanGroup(ALL, "wildcard")

    @pytest.mark.parametrize("bucket", ["overhead", Bucket.OVERHEAD])
    def test_an_umbrella_with_a_bucket_is_a_span_group_error_however_the_bucket_is_spelled(
        self, bucket: Bucket | str
    ) -> None:
        with pytest.raises(SpanGroupError, match=r"'myumbrella' is an umbrella and has bucket 'overhead'"):
            SpanGroup("myumbrella", "phases", bucket, umbrella=True)  # type: ignore[arg-type]

    def test_an_unknown_bucket_is_a_span_group_error_naming_the_group_and_the_buckets(self) -> None:
        expected = r"'mygroup' has bucket 'busy'; use one of productive, overhead, idle, wasted"
        with pytest.raises(SpanGroupError, match=expected):
            SpanGroup("mygroup", "work", "busy")  # type: ignore[arg-type]

    def test_namespace_named_all_is_reserved(self) -> None:
        with pytest.raises(SpanGroupError, match="reserved"):
            register_span_groups(ALL, [SpanGroup(_fresh(), "x")])

    def test_preset_named_all_is_reserved(self) -> None:
        name = _fresh()
        with pytest.raises(SpanGroupError, match="clashes"):
            register_span_groups(_fresh("ns"), [SpanGroup(name, "x")], presets={ALL: [name]})

    def test_umbrella_with_a_bucket_is_an_error(self) -> None:
        with pytest.raises(SpanGroupError, match="umbrella"):
            SpanGroup(_fresh(), "both", bucket=Bucket.PRODUCTIVE, umbrella=True)

    @pytest.mark.parametrize("name", ["", "Upper", "with-dash", "with.dot", "has space"])
    def test_invalid_group_name_is_an_error(self, name: str) -> None:
        with pytest.raises(SpanGroupError, match="invalid"):
            SpanGroup(name, "bad")

    def test_bucket_given_as_string_becomes_a_bucket(self) -> None:
        assert SpanGroup(_fresh(), "x", bucket="idle").bucket is Bucket.IDLE  # type: ignore[arg-type]

    def test_empty_preset_is_an_error(self) -> None:
        with pytest.raises(SpanGroupError, match="is empty"):
            register_span_groups(_fresh("ns"), [SpanGroup(_fresh(), "x")], presets={_fresh("p"): []})

    def test_preset_with_unknown_member_is_an_error(self) -> None:
        missing = _fresh("missing")
        with pytest.raises(SpanGroupError, match=f"unknown groups \\[{missing!r}\\]"):
            register_span_groups(_fresh("ns"), [SpanGroup(_fresh(), "x")], presets={_fresh("p"): [missing]})

    def test_preset_may_name_other_presets(self) -> None:
        namespace, (name,) = _register_fresh(1)
        preset = _fresh("p")
        register_span_groups(namespace, [], presets={preset: ["minimal", name]})
        assert resolve_span_group_spec([preset]).enabled == {
            "job", "step", "startup", "setup", "efficiency", name
        }

    def test_namespace_in_a_spec_enables_all_its_groups(self) -> None:
        namespace, names = _register_fresh(3)
        assert resolve_span_group_spec([namespace]).enabled == set(names)

    def test_non_span_group_is_an_error(self) -> None:
        with pytest.raises(SpanGroupError, match="expected SpanGroup"):
            register_span_groups(_fresh("ns"), ["not-a-group"])  # type: ignore[list-item]


def test_the_reference_default_preset_resolves_to_per_step() -> None:
    """A spec carried over from the reference instrumentation ('default') enables per_step."""
    from rlsight import resolve_span_group_spec

    default = resolve_span_group_spec(["default"])
    assert default.pending == ()
    assert set(default.enabled) == set(resolve_span_group_spec(["per_step"]).enabled)
