"""The TensorRT header sources of ``plugin build`` (dcnconvert.backend.plugin.headers): a folder, a git
clone, a ``file://`` tarball, all made of a tiny fake ``include/``; the offline error; headers of the
other major."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from cli_runner import error_lines, invoke, one_json
from support.fake_build import BUILD, empty, fake_include, tarball

from dcnconvert.backend.plugin import headers as plugin_headers
from dcnconvert.errors import MissingDependencyError, UsageError

pytestmark = pytest.mark.plugin_build

# ------------------------------------------------------------------------------------------------
# headers
# ------------------------------------------------------------------------------------------------



def test_offline_is_one_error_saying_what_to_fetch_and_where(fake_tools, tmp_path):
    for source in (f"file://{tmp_path}/missing/{{tag}}.tar.gz", "http://127.0.0.1:9/{tag}.tar.gz"):
        res = invoke("plugin", "build", "--tensorrt-version", "10.16.1.11", "--arch", "sm_90",
                     "--headers-source", source, "--json")
        assert res.exit_code == 4, res.stderr
        (line,) = error_lines(res)
        assert "TensorRT 10.16.1.11's headers were not found" in line
        assert source.replace("{tag}", "v10.16.1") in line
        assert "include/ of NVIDIA/TensorRT at tag v10.16" in res.stderr
        assert str(tmp_path / "cache" / "headers" / "v10.16" / "include") in res.stderr
        assert "--headers DIR" in res.stderr
        assert one_json(res.stdout)["errors"][0]["exit_code"] == 4
    assert not fake_tools.exists()  # make never ran
    assert empty(tmp_path / "cache" / "headers") and empty(tmp_path / "cache" / "plugins")


def test_url_source_keeps_only_include(isolated, tmp_path):
    inc = fake_include(tmp_path / "repo" / "include", 10, 16, 0)
    (inc / "impl").mkdir()
    (inc / "impl" / "NvInferImpl.h").write_text("// impl\n")
    tarball(tmp_path / "src" / "v10.16.tar.gz", inc, "TensorRT-10.16")
    found = plugin_headers.find_headers("10.16.1.11", source=f"file://{tmp_path}/src/{{tag}}.tar.gz")
    assert found.include_dir == isolated / "headers" / "v10.16" / "include"
    assert found.version == "10.16.0" and found.origin == "fetched (v10.16)"
    stored = sorted(p.relative_to(isolated / "headers" / "v10.16").as_posix()
                    for p in (isolated / "headers" / "v10.16").rglob("*") if p.is_file())
    assert stored == ["include/NvInfer.h", "include/NvInferVersion.h", "include/impl/NvInferImpl.h"]
    assert not any((isolated / "tmp").iterdir())  # the temporary folder is gone
    # Next time from the cache, without the source.
    shutil.rmtree(tmp_path / "src")
    again = plugin_headers.find_headers("10.16.1.11", source=f"file://{tmp_path}/src/{{tag}}.tar.gz")
    assert again.include_dir == found.include_dir and again.origin == "cache (v10.16)"


def test_folder_source_with_tags_or_one_include(isolated, tmp_path):
    fake_include(tmp_path / "tags" / "v10.3.0" / "include", 10, 3, 0, indirect=False)
    fake_include(tmp_path / "tags" / "v11.1" / "include", 11, 1, 0)
    found = plugin_headers.find_headers("10.3.0.26", source=str(tmp_path / "tags"))
    assert found.version == "10.3.0" and found.include_dir == isolated / "headers" / "v10.3.0" / "include"
    found = plugin_headers.find_headers("11.1.0.106", source=str(tmp_path / "tags"))
    assert found.version == "11.1.0" and found.include_dir == isolated / "headers" / "v11.1" / "include"
    # A folder holding include/ itself is stored under the tag of the version it states.
    fake_include(tmp_path / "plain" / "include", 10, 13, 2)
    found = plugin_headers.find_headers("10.13.2.6", source=str(tmp_path / "plain"))
    assert found.include_dir == isolated / "headers" / "v10.13.2" / "include" and found.version == "10.13.2"
    with pytest.raises(MissingDependencyError, match="holds no NvInfer.h of TensorRT 11"):  # another major
        plugin_headers.find_headers("11.0.0", source=str(tmp_path / "plain"))


def test_git_source(isolated, tmp_path, monkeypatch):
    repo = tmp_path / "TensorRT"
    fake_include(repo / "include", 10, 16, 0)
    (repo / "README.md").write_text("not headers\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", "-c",
           "commit.gpgsign=false", "-c", "tag.gpgsign=false"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "headers"], check=True)
    subprocess.run([*git, "tag", "v10.16"], check=True)
    (repo / "include" / "NvInfer.h").write_text("// changed after the tag\n")  # the work tree is not used
    monkeypatch.setenv(plugin_headers.SOURCE_ENV_VAR, str(repo))  # the source from the environment
    found = plugin_headers.find_headers("10.16.1.11")
    assert found.origin == "fetched (v10.16)" and found.version == "10.16.0"
    assert (found.include_dir / "NvInfer.h").read_text() == '#include "NvInferVersion.h"\n'
    assert not (found.include_dir.parent / "README.md").exists()
    with pytest.raises(MissingDependencyError) as err:
        plugin_headers.find_headers("10.15.0", source=str(repo))
    assert "no tag v10.15" in err.value.message and "v10.15/include" in err.value.hint


def test_bad_source_is_a_usage_error(isolated, tmp_path):
    with pytest.raises(UsageError, match="without"):
        plugin_headers.find_headers("10.16.1", source="https://example.com/TensorRT.tar.gz")
    with pytest.raises(UsageError, match="neither"):
        plugin_headers.find_headers("10.16.1", source=str(tmp_path / "no-such-folder"))


def test_local_headers_of_another_major_are_skipped(fake_tools, tmp_path, monkeypatch):
    eleven = fake_include(tmp_path / "trt11" / "include", 11, 1, 0)
    ten = fake_include(tmp_path / "trt10" / "include", 10, 16, 0)
    monkeypatch.setenv("TENSORRT_INCLUDE_DIR", str(eleven))
    monkeypatch.setattr(plugin_headers, "SYSTEM_HEADER_DIRS", (str(tmp_path / "none"), str(ten)))
    res = invoke(*BUILD, "--json")
    assert res.exit_code == 0, res.stderr
    assert f"skipping the headers in {eleven} ($TENSORRT_INCLUDE_DIR): TensorRT 11.1.0, not TensorRT 10" \
        in res.stderr
    obj = one_json(res.stdout)
    assert obj["headers_dir"] == str(ten.resolve()) and obj["headers_version"] == "10.16.0"
    assert f"TENSORRT_INCLUDE_DIR={ten.resolve()}" in fake_tools.read_text()


def test_given_headers_of_another_major_are_refused(fake_tools, tmp_path):
    eleven = fake_include(tmp_path / "trt11" / "include", 11, 1, 0)
    res = invoke(*BUILD, "--headers", eleven)
    assert res.exit_code == 2
    (line,) = error_lines(res)
    assert f"--headers {eleven} holds TensorRT 11.1.0 headers" in line
    res = invoke("plugin", "build", "--tensorrt-version", "10.16.1.11", "--arch", "sm_90",
                 "--headers", tmp_path)
    assert res.exit_code == 2 and "no NvInfer.h" in error_lines(res)[0]
    assert not fake_tools.exists()
