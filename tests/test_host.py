"""Device and host identity: rl.devices and hw.* from Ray or CUDA_VISIBLE_DEVICES, SLURM, Kubernetes."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsight import RL, TelemetryConfig, setup_telemetry, span
from rlsight._host import accelerator_ids, host_attributes, pid_alive


def _resource(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> dict[str, object]:
    for name in ("CUDA_VISIBLE_DEVICES", "RLSIGHT_DEVICES", "SLURM_JOB_ID", "SLURMD_NODENAME", "SLURM_PROCID",
                 "KUBERNETES_SERVICE_HOST", "POD_NAME", "K8S_POD_NAME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with setup_telemetry(TelemetryConfig(run_dir=str(tmp_path), strict=True)) as telemetry:
        with span(RL.TRAINING, "rl.train.policy"):
            pass
        return dict(telemetry.resource_attributes)


class TestDevices:
    def test_cuda_visible_devices_gives_the_count_and_the_hw_ids(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        resource = _resource(monkeypatch, tmp_path, CUDA_VISIBLE_DEVICES="2,3")
        assert resource["rl.devices"] == 2
        assert resource["hw.type"] == "gpu"
        assert tuple(resource["hw.id"]) == ("2", "3")  # type: ignore[arg-type]

    def test_an_explicit_count_wins_over_detection(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        resource = _resource(monkeypatch, tmp_path, CUDA_VISIBLE_DEVICES="0,1,2,3", RLSIGHT_DEVICES="8")
        assert resource["rl.devices"] == 8

    @pytest.mark.parametrize("value", ["", "-1", "NoDevFiles"])
    def test_no_visible_device_leaves_devices_unset(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str
    ) -> None:
        resource = _resource(monkeypatch, tmp_path, CUDA_VISIBLE_DEVICES=value)
        assert "rl.devices" not in resource and "hw.id" not in resource

    def test_uuids_are_kept_as_ids(self) -> None:
        assert accelerator_ids({"CUDA_VISIBLE_DEVICES": "GPU-8f2a, GPU-11c0"}) == ("GPU-8f2a", "GPU-11c0")

    def test_a_process_without_devices_has_none(self) -> None:
        assert accelerator_ids({}) == ()


class TestHost:
    def test_slurm_attributes_when_present(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        resource = _resource(
            monkeypatch, tmp_path, SLURM_JOB_ID="48121", SLURMD_NODENAME="gpu-node-07", SLURM_PROCID="3"
        )
        assert (resource["rl.slurm.job_id"], resource["rl.slurm.node"], resource["rl.slurm.procid"]) == (
            "48121", "gpu-node-07", 3,
        )
        assert isinstance(resource["host.name"], str) and resource["host.name"]

    def test_outside_slurm_and_kubernetes_nothing_is_added(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        resource = _resource(monkeypatch, tmp_path)
        assert not [k for k in resource if k.startswith(("rl.slurm.", "k8s."))]

    def test_kubernetes_pod_from_the_downward_api(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        resource = _resource(monkeypatch, tmp_path, KUBERNETES_SERVICE_HOST="10.0.0.1", POD_NAME="worker-3")
        assert resource["k8s.pod.name"] == "worker-3"

    def test_in_a_pod_without_downward_api_the_hostname_and_namespace_file_are_used(
        self, tmp_path: Path
    ) -> None:
        namespace = tmp_path / "namespace"
        namespace.write_text("rl-jobs\n")
        env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "grpo-worker-3"}
        expected = {"k8s.pod.name": "grpo-worker-3", "k8s.namespace.name": "rl-jobs"}
        assert host_attributes(env, namespace) == expected

    def test_hostname_alone_is_not_a_pod(self, tmp_path: Path) -> None:
        assert host_attributes({"HOSTNAME": "laptop"}, tmp_path / "missing") == {}


def test_a_killed_process_its_parent_has_not_reaped_is_not_alive() -> None:
    """A rank killed under a driver that hangs (and so never waits on it) is a zombie: its pid
    still answers signal 0, but nothing runs, so `rlsight watch` must mark it exited."""
    import os
    import signal
    import subprocess
    import sys
    import time

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pid_alive(child.pid)
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child did not die"
            time.sleep(0.01)
        assert not pid_alive(child.pid)  # not reaped yet: a zombie
    finally:
        child.kill()
        child.wait()
    assert not pid_alive(child.pid)
    assert pid_alive(os.getpid())


def test_a_process_with_ray_loaded_records_the_node_address_ray_prints_in_its_errors(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's errors give a pid with its node (``pid=22574, ip=10.0.0.5``); the report names the
    run's process with that pid only when it is known by that address, so rlsight records it."""
    import sys

    import ray

    from rlsight._identity import Identity, resource_attributes
    from rlsight._semconv import HOST_IP

    config = TelemetryConfig(run_id="ip", local_store=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: True)  # as in a Ray worker or driver
    assert resource_attributes(config, Identity("driver", 0, 1))[HOST_IP] == [ray.util.get_node_ip_address()]
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # loaded, not connected: no look-up
    assert HOST_IP not in resource_attributes(config, Identity("driver", 0, 1))
    monkeypatch.delitem(sys.modules, "ray")  # without Ray loaded: nothing is imported for it
    assert HOST_IP not in resource_attributes(config, Identity("driver", 0, 1))
    assert "ray" not in sys.modules
