"""Model sources: parsing once into a `Source` (a table of malformed sources), ids, file roots,
ETag digests."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from mlxfleet_agent.models import errors, local, s3, source


@pytest.mark.parametrize(
    ("text", "revision", "expected"),
    [
        pytest.param(
            "file:///models/llama",
            None,
            source.FilePath(PurePosixPath("/models/llama")),
            id="file",
        ),
        pytest.param(
            "s3://models/llama/8b", None, source.S3Prefix("models", "llama/8b/"), id="s3-prefix"
        ),
        pytest.param(
            "s3://models/llama/8b/", None, source.S3Prefix("models", "llama/8b/"), id="s3-trailing"
        ),
        pytest.param("s3://models", None, source.S3Prefix("models", ""), id="s3-bucket-only"),
        pytest.param(
            "hf://mlx-community/Llama-3.2-1B-Instruct-4bit",
            "abc123",
            source.HfRepo("mlx-community/Llama-3.2-1B-Instruct-4bit"),
            id="hf-rev",
        ),
        pytest.param("hf://org/repo", None, source.HfRepo("org/repo"), id="hf"),
    ],
)
def test_parse(text: str, revision: str | None, expected: source.Location) -> None:
    parsed = source.parse(text, revision)
    assert (parsed.text, parsed.revision, parsed.location) == (text, revision, expected)


@pytest.mark.parametrize(
    ("text", "field", "needle"),
    [
        pytest.param("http://example.com/m", "source", "unknown scheme", id="http"),
        pytest.param("ftp:///m", "source", "unknown scheme", id="ftp"),
        pytest.param("/models/llama", "source", "unknown scheme", id="bare-path"),
        pytest.param("file://host/models", "source", "file:///", id="file-with-host"),
        pytest.param("file://models/llama", "source", "file:///", id="file-relative"),
        pytest.param("file:///models/../../etc", "source", "'..'", id="file-traversal"),
        pytest.param("file:///models/./x", "source", "'..'", id="file-dot"),
        pytest.param("file:///models/x?y=1", "source", "query", id="file-query"),
        pytest.param("s3://UPPER/x", "source", "s3://", id="s3-bad-bucket"),
        pytest.param("s3://a/x", "source", "s3://", id="s3-short-bucket"),
        pytest.param("s3://bucket/a/../b", "source", "'..'", id="s3-traversal"),
        pytest.param("s3://bucket/a//b", "source", "empty", id="s3-empty-segment"),
        pytest.param("s3://bucket/a/./b", "source", "empty or '.'", id="s3-dot-segment"),
        pytest.param("s3://bucket/x#frag", "source", "fragment", id="s3-fragment"),
        pytest.param("hf://justrepo", "source", "hf://", id="hf-no-org"),
        pytest.param("hf://org/repo/extra", "source", "hf://", id="hf-too-deep"),
        pytest.param("hf://org/repo@main", "source", "hf://", id="hf-at-revision-use-field"),
        pytest.param("", "source", "4 to 2048", id="empty"),
        pytest.param("s3://" + "a" * 2050, "source", "4 to 2048", id="too-long"),
        pytest.param("file:///models/a\x00b", "source", "control", id="file-nul"),
        pytest.param("file:///models/llama\n", "source", "control", id="trailing-newline"),
        pytest.param("file:///models/ll\tama", "source", "control", id="tab"),
        pytest.param(" file:///models/llama", "source", "whitespace", id="leading-space"),
        pytest.param("file:///models/llama ", "source", "whitespace", id="trailing-space"),
        pytest.param("hf://org/repo\r", "source", "control", id="hf-carriage-return"),
        pytest.param("hf://org/..", "source", "hf://", id="hf-dot-dot"),
        pytest.param("hf://../repo", "source", "hf://", id="hf-dot-dot-org"),
        pytest.param("hf://org/.", "source", "hf://", id="hf-dot"),
        pytest.param("hf://org/a..b", "source", "hf://", id="hf-double-dot-inside"),
        pytest.param("hf://org/-repo", "source", "hf://", id="hf-leading-dash"),
    ],
)
def test_parse_rejects(text: str, field: str, needle: str) -> None:
    with pytest.raises(errors.InvalidSource, match=needle) as info:
        source.parse(text)
    assert info.value.field == field
    assert info.value.http_status == 422
    assert info.value.allowed is not None


@pytest.mark.parametrize(
    "revision",
    [
        pytest.param("", id="empty"),
        pytest.param("x" * 257, id="too-long"),
        pytest.param("a\nb", id="newline"),
    ],
)
def test_parse_rejects_revision(revision: str) -> None:
    with pytest.raises(errors.InvalidSource, match="revision") as info:
        source.parse("hf://org/repo", revision)
    assert info.value.field == "revision"


def test_model_id_is_stable_and_distinguishes_revisions() -> None:
    a = source.parse("s3://bucket/m", None).id
    assert a == source.parse("s3://bucket/m", None).id
    assert len(a) == 16
    assert a != source.parse("s3://bucket/m", "v2").id
    assert a != source.parse("s3://bucket/n", None).id


@pytest.mark.parametrize(
    ("etag", "md5"),
    [
        pytest.param(
            '"5d41402abc4b2a76b9719d911017c592"',
            "5d41402abc4b2a76b9719d911017c592",
            id="single-part",
        ),
        pytest.param(
            '"5D41402ABC4B2A76B9719D911017C592"', "5d41402abc4b2a76b9719d911017c592", id="upper"
        ),
        pytest.param('"5d41402abc4b2a76b9719d911017c592-3"', None, id="multipart"),
        pytest.param("", None, id="none"),
    ],
)
def test_etag_md5(etag: str, md5: str | None) -> None:
    assert s3.RemoteObject("k", "k", 1, etag).md5() == md5


def _model(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def test_resolve_file_inside_root(tmp_path: Path) -> None:
    model = _model(tmp_path / "root" / "m")
    src = source.FilePath(PurePosixPath(str(model)))
    assert local.resolve(src, [tmp_path / "root"]) == model.resolve()


@pytest.mark.parametrize(
    "escape",
    [
        pytest.param("symlink-dir", id="symlink-dir"),
        pytest.param("symlink-parent", id="symlink-parent"),
        pytest.param("outside", id="outside"),
        pytest.param("missing-outside", id="missing-outside"),
    ],
)
def test_resolve_file_rejects_escapes(tmp_path: Path, escape: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    outside = _model(tmp_path / "elsewhere" / "m")
    if escape == "symlink-dir":
        (root / "link").symlink_to(outside)
        path = root / "link"
    elif escape == "symlink-parent":
        (root / "up").symlink_to(tmp_path / "elsewhere")
        path = root / "up" / "m"
    elif escape == "outside":
        path = outside
    else:
        path = tmp_path / "nope" / "m"
    with pytest.raises(errors.SourceNotAllowed, match="outside the allowed roots") as info:
        local.resolve(source.FilePath(PurePosixPath(str(path))), [root])
    if escape.startswith("symlink"):
        assert "elsewhere" not in info.value.message, "the 403 reveals where the link points"
    assert str(path) in info.value.message
    assert info.value.allowed == str(root.resolve())
    assert info.value.http_status == 403


def test_resolve_file_missing_or_not_a_model(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(errors.ModelNotFound, match="no such directory"):
        local.resolve(source.FilePath(PurePosixPath(str(tmp_path / "nope"))), [tmp_path])
    with pytest.raises(errors.ModelNotFound, match=r"no config\.json"):
        local.resolve(source.FilePath(PurePosixPath(str(tmp_path / "empty"))), [tmp_path])
