"""The shared command-line checks: a device torch cannot run on here is refused by its flag, before any work."""

import pytest
import torch

from specdec.options import device_option


def test_a_device_torch_runs_on_passes():
    assert device_option("cpu") == "cpu"


@pytest.mark.parametrize(
    "value, message",
    [
        ("gpu0", r"--device: expected a torch device \(cpu, cuda or cuda:N\), got 'gpu0'"),
        ("meta", r"--device: expected cpu, cuda or cuda:N, got 'meta'"),
        ("cuda", r"--device: 'cuda' asked for, but torch sees no CUDA device here"),
    ],
)
def test_other_devices_are_refused_by_name(value, message, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match=message):
        device_option(value)


def test_a_cuda_index_past_the_devices_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert device_option("cuda:0", "--dev") == "cuda:0"
    with pytest.raises(SystemExit, match=r"--dev: 'cuda:1' asked for, but torch sees 1 CUDA device\(s\)"):
        device_option("cuda:1", "--dev")
