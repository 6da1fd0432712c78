"""Choosing the runtime and TensorRT-RTX's target compute capabilities (no TensorRT needed)."""

from __future__ import annotations

import pytest

from dcnconvert.backend.trt import runtimes
from dcnconvert.backend.trt.engine import BuildOptions
from dcnconvert.backend.trt.versions import api_for
from dcnconvert.errors import MissingDependencyError, UsageError


@pytest.mark.parametrize("text, expected", [
    ("8.6", [(8, 6)]), ("8.6,12.0", [(8, 6), (12, 0)]), ("sm_86", [(8, 6)]), ("86", [(8, 6)]),
    ("SM120", [(12, 0)]), (" 8.9 , 8.9 ", [(8, 9)]), ("7.5", [(7, 5)]),
])
def test_compute_capabilities_are_read(text, expected):
    assert runtimes.parse_compute_capabilities(text) == expected


def test_repeated_values_keep_their_order():
    assert runtimes.parse_compute_capabilities(("12.0", "8.6,12.0")) == [(12, 0), (8, 6)]


@pytest.mark.parametrize("text, words", [("9.0", "cannot build for 9.0"), ("eight", "cannot read 'eight'"),
                                         ("8.6.1", "cannot read")])
def test_bad_compute_capabilities(text, words):
    with pytest.raises(UsageError, match=words) as info:
        runtimes.parse_compute_capabilities(text)
    assert info.value.exit_code == 2 and "8.6" in info.value.hint


class TestChooseRuntime:
    def test_tensorrt_first(self, monkeypatch):
        both = {"tensorrt": "10.16.0", "tensorrt-rtx": "1.7"}
        monkeypatch.setattr(runtimes, "installed_runtimes", lambda: both)
        choice = runtimes.choose_runtime()
        assert (choice.name, choice.version) == ("tensorrt", "10.16.0") and "tensorrt-rtx" in choice.reason

    def test_rtx_alone(self, monkeypatch):
        monkeypatch.setattr(runtimes, "installed_runtimes", lambda: {"tensorrt-rtx": "1.7.1.116"})
        choice = runtimes.choose_runtime("auto")
        assert choice.name == "tensorrt-rtx" and choice.reason == "the only runtime installed"

    def test_asked_for_and_missing(self, monkeypatch):
        monkeypatch.setattr(runtimes, "installed_runtimes", lambda: {"tensorrt": "10.16.0"})
        with pytest.raises(MissingDependencyError, match="--runtime tensorrt-rtx") as info:
            runtimes.choose_runtime("tensorrt-rtx")
        assert info.value.exit_code == 4 and "dcnconvert[rtx]" in info.value.hint
        assert runtimes.choose_runtime("tensorrt").reason == "given by --runtime"

    def test_none_installed(self, monkeypatch):
        monkeypatch.setattr(runtimes, "installed_runtimes", lambda: {})
        with pytest.raises(MissingDependencyError) as info:
            runtimes.choose_runtime()
        assert "dcnconvert[trt]" in info.value.hint and "dcnconvert[rtx]" in info.value.hint

    def test_unknown_name(self):
        with pytest.raises(UsageError, match="'tensorrt-lean' is not one of"):
            runtimes.choose_runtime("tensorrt-lean")


class TestDefaultTargets:
    def test_no_gpu(self, monkeypatch):
        monkeypatch.setattr(runtimes, "local_compute_capability", lambda: None)
        targets, why = runtimes.default_compute_capabilities()
        assert targets == [] and "no GPU here" in why and "portable" in why

    def test_supported_gpu(self, monkeypatch):
        monkeypatch.setattr(runtimes, "local_compute_capability", lambda: (8, 9))
        expected = ([(8, 9)], "this machine's GPU (compute capability 8.9)")
        assert runtimes.default_compute_capabilities() == expected

    def test_unsupported_gpu(self, monkeypatch):
        monkeypatch.setattr(runtimes, "local_compute_capability", lambda: (9, 0))
        targets, why = runtimes.default_compute_capabilities()
        assert targets == [] and "9.0" in why and "not one TensorRT-RTX runs on" in why

    @pytest.mark.parametrize("local, words", [(None, "no GPU"), ((9, 0), "compute capability 9.0")])
    def test_engines_cannot_run(self, monkeypatch, local, words):
        monkeypatch.setattr(runtimes, "local_compute_capability", lambda: local)
        with pytest.raises(MissingDependencyError, match=words) as info:
            runtimes.check_rtx_can_run()
        assert info.value.exit_code == 4

    def test_engines_can_run(self, monkeypatch):
        monkeypatch.setattr(runtimes, "local_compute_capability", lambda: (12, 0))
        runtimes.check_rtx_can_run()


def test_rtx_api():
    api = api_for("1.7.1.116", "tensorrt-rtx")
    assert api.runtime == "tensorrt-rtx" and api.compute_capabilities and api.always_strongly_typed
    assert not api.precision_flags and api.label == "TensorRT-RTX 1.7.1.116"
    assert api_for("10.16.0").label == "TensorRT 10.16.0" and not api_for("10.16.0").compute_capabilities
    with pytest.raises(MissingDependencyError, match="TensorRT-RTX 1.6.0 is not supported"):
        api_for("1.6.0", "tensorrt-rtx")


class TestBuildOptions:
    def test_compute_capabilities_need_rtx(self):
        with pytest.raises(UsageError, match="needs --runtime tensorrt-rtx"):
            BuildOptions(runtime="tensorrt", compute_capabilities=("8.6",)).validate()
        BuildOptions(runtime="tensorrt-rtx", compute_capabilities=("8.6",)).validate()
        BuildOptions(compute_capabilities=("8.6",)).validate()  # auto: checked against the runtime chosen

    def test_bad_values(self):
        with pytest.raises(UsageError, match="cannot build for 9.0"):
            BuildOptions(runtime="tensorrt-rtx", compute_capabilities=("9.0",)).validate()
        with pytest.raises(UsageError, match="--runtime 'lean'"):
            BuildOptions(runtime="lean").validate()
