"""Buckets and the two context scopes (rlsight.buckets), seen through the spans they classify."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import pytest

from rlsight.buckets import (
    BUCKET_PRIORITY,
    Bucket,
    bucket_scope,
    current_bucket_override,
    in_per_prompt_scope,
    per_prompt_scope,
)
from rlsight.spans import span, umbrella_span
from rlsight.testing import Capture


def _bucket_of(cap: Capture, name: str) -> Any:
    (found,) = [s for s in cap.spans() if s.name == name]
    return (found.attributes or {}).get("rl.bucket")


class TestBucket:
    def test_wire_values_are_the_four_bucket_names(self) -> None:
        assert [b.value for b in Bucket] == ["productive", "overhead", "idle", "wasted"]

    def test_bucket_is_a_str(self) -> None:
        assert Bucket.IDLE == "idle" and isinstance(Bucket.IDLE, str)

    def test_priority_is_productive_wasted_overhead_idle(self) -> None:
        assert BUCKET_PRIORITY == (Bucket.PRODUCTIVE, Bucket.WASTED, Bucket.OVERHEAD, Bucket.IDLE)


class TestBucketScope:
    def test_scope_reclassifies_a_productive_span(self, capture: Capture) -> None:
        with bucket_scope(Bucket.OVERHEAD), span("generation", "rl.test.validate_gen"):
            pass
        assert _bucket_of(capture, "rl.test.validate_gen") == "overhead"

    def test_scope_accepts_the_string_value(self, capture: Capture) -> None:
        with bucket_scope("wasted") as bucket:
            assert bucket is Bucket.WASTED
            with span("generation", "rl.test.gen"):
                pass
        assert _bucket_of(capture, "rl.test.gen") == "wasted"

    def test_scope_does_not_give_an_umbrella_span_a_bucket(self, capture: Capture) -> None:
        with bucket_scope("overhead"), umbrella_span("rollout", "rl.test.rollout"):
            pass
        assert _bucket_of(capture, "rl.test.rollout") is None

    def test_scope_ends_with_its_block(self, capture: Capture) -> None:
        with bucket_scope("overhead"):
            pass
        with span("generation", "rl.test.after"):
            pass
        assert _bucket_of(capture, "rl.test.after") == "productive"

    def test_scope_ends_when_the_block_raises(self) -> None:
        with pytest.raises(RuntimeError), bucket_scope("idle"):
            raise RuntimeError
        assert current_bucket_override() is None

    def test_nested_scopes_restore_the_outer_one(self) -> None:
        with bucket_scope("overhead"):
            with bucket_scope("wasted"):
                assert current_bucket_override() is Bucket.WASTED
            assert current_bucket_override() is Bucket.OVERHEAD
        assert current_bucket_override() is None

    def test_unknown_bucket_is_an_error_naming_it(self) -> None:
        with pytest.raises(ValueError, match=r"'busy'.*productive, overhead, idle, wasted"):
            bucket_scope("busy")  # type: ignore[arg-type]

    def test_sibling_task_does_not_see_another_tasks_scope(self, capture: Capture) -> None:
        async def scenario() -> None:
            entered, checked = asyncio.Event(), asyncio.Event()

            async def validation() -> None:
                with bucket_scope("overhead"):
                    entered.set()
                    await checked.wait()
                    with span("generation", "rl.test.in_scope"):
                        pass

            async def training() -> None:
                await entered.wait()
                with span("generation", "rl.test.sibling"):
                    pass
                checked.set()

            await asyncio.gather(validation(), training())

        asyncio.run(scenario())
        assert _bucket_of(capture, "rl.test.in_scope") == "overhead"
        assert _bucket_of(capture, "rl.test.sibling") == "productive"

    def test_child_task_created_inside_the_scope_inherits_it(self, capture: Capture) -> None:
        async def scenario() -> None:
            async def generate() -> None:
                await asyncio.sleep(0)
                with span("generation", "rl.test.child_task"):
                    pass

            with bucket_scope("overhead"):
                task = asyncio.create_task(generate())
            await task  # the scope has ended in the parent by now

        asyncio.run(scenario())
        assert _bucket_of(capture, "rl.test.child_task") == "overhead"

    def test_thread_started_with_a_copied_context_inherits_the_scope(self, capture: Capture) -> None:
        def generate() -> None:
            with span("generation", "rl.test.copied"):
                pass

        with bucket_scope("overhead"):
            thread = threading.Thread(target=contextvars.copy_context().run, args=(generate,))
            thread.start()
        thread.join()
        assert _bucket_of(capture, "rl.test.copied") == "overhead"

    def test_thread_without_a_copied_context_does_not_see_the_scope(self, capture: Capture) -> None:
        def generate() -> None:
            with span("generation", "rl.test.plain"):
                pass

        with bucket_scope("overhead"):
            thread = threading.Thread(target=generate)
            thread.start()
            thread.join()
        assert _bucket_of(capture, "rl.test.plain") == "productive"


class TestPerPromptScope:
    def test_scope_is_visible_inside_and_gone_after(self) -> None:
        assert not in_per_prompt_scope()
        with per_prompt_scope():
            assert in_per_prompt_scope()
        assert not in_per_prompt_scope()

    def test_sibling_task_does_not_see_another_tasks_per_prompt_scope(self) -> None:
        async def scenario() -> list[bool]:
            entered, checked = asyncio.Event(), asyncio.Event()
            seen: list[bool] = []

            async def per_prompt() -> None:
                with per_prompt_scope():
                    entered.set()
                    await checked.wait()

            async def batch() -> None:
                await entered.wait()
                seen.append(in_per_prompt_scope())
                checked.set()

            await asyncio.gather(per_prompt(), batch())
            return seen

        assert asyncio.run(scenario()) == [False]

    def test_thread_started_with_a_copied_context_inherits_per_prompt_scope(self) -> None:
        seen: list[bool] = []
        with per_prompt_scope():
            ctx = contextvars.copy_context()
        thread = threading.Thread(target=ctx.run, args=(lambda: seen.append(in_per_prompt_scope()),))
        thread.start()
        thread.join()
        assert seen == [True]
