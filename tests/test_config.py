"""Settings: the shipped qdrant.yaml, lookup order, and errors that name the bad key."""

import re
from pathlib import Path

import pytest

from coderag.base.config import Settings, load_settings
from coderag.base.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def test_config_shipped_yaml_equals_the_defaults():
    """qdrant.yaml documents the defaults: loading it must give exactly Settings()."""
    assert load_settings(config_path=REPO / "qdrant.yaml") == Settings()


@pytest.mark.parametrize("text, key", [
    ("store: {mode: foo}", "store.mode"),
    ("chunking: {max_tokens: -3}", "chunking.max_tokens"),
    ("embedding: {batch_size: lots}", "embedding.batch_size"),
    ("store: {colour: red}", "store.colour"),
    ("retrieval: {merge_ratio: 2}", "retrieval.merge_ratio"),
])
def test_config_bad_value_names_the_key(tmp_path, text, key):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_settings(config_path=cfg)
    assert key in str(exc.value) and str(cfg) in str(exc.value)


def test_config_invalid_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("store: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(config_path=bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(config_path=tmp_path / "nope.yaml")


def test_config_root_file_is_read_only_when_it_is_ours(tmp_path):
    (tmp_path / "qdrant.yaml").write_text("storage:\n  storage_path: ./x\n")  # a Qdrant server's own config
    assert load_settings(tmp_path) == Settings()
    (tmp_path / "qdrant.yaml").write_text("chunking:\n  max_tokens: 150\n")
    assert load_settings(tmp_path).chunking.max_tokens == 150


def test_config_env_var_wins_over_root_file(tmp_path, monkeypatch):
    (tmp_path / "qdrant.yaml").write_text("chunking:\n  max_tokens: 150\n")
    env_cfg = tmp_path / "env.yaml"
    env_cfg.write_text("chunking:\n  max_tokens: 120\n")
    monkeypatch.setenv("CODERAG_CONFIG", str(env_cfg))
    assert load_settings(tmp_path).chunking.max_tokens == 120


def test_config_relative_paths_are_read_from_the_files_folder(tmp_path, monkeypatch):
    """`store.path: .shard` named a folder of whatever folder the command ran in: a search from src/ opened
    another, empty shard, and a relative model path made the index's fingerprint differ between two shells."""
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "qdrant.yaml").write_text("store:\n  path: .shard\nembedding:\n  model_path: models/mini\n")
    elsewhere = tmp_path / "conf"
    elsewhere.mkdir()
    (elsewhere / "coderag.yaml").write_text("store:\n  path: ../shards/repo\n")
    monkeypatch.chdir(root / "src")
    s = load_settings(root)
    assert s.store.path == str(root.resolve() / ".shard")
    assert s.model_dir() == root.resolve() / "models" / "mini"
    assert load_settings(root, elsewhere / "coderag.yaml").store.path == str(elsewhere.resolve() / "../shards/repo")
    monkeypatch.setenv("HOME", str(tmp_path))
    (root / "qdrant.yaml").write_text("store:\n  path: ~/shard\n")
    assert load_settings(root).store.path == str(tmp_path / "shard")


@pytest.mark.parametrize("text, named", [
    ("retreival:\n  fusion_top_k: 5\n", "retreival: Extra inputs are not permitted; did you mean 'retrieval'?"),
    ("retrieval:\n  fusion_top_k: 5\nchunkng:\n  max_tokens: 100\n", "chunkng: Extra inputs are not permitted; did "
                                                                     "you mean 'chunking'?"),
])
def test_config_a_mistyped_section_is_named_not_the_whole_file_ignored(tmp_path, text, named):
    """A section's name mistyped made the file look like another tool's qdrant.yaml: every setting in it, the
    right ones too, was silently left unread."""
    (tmp_path / "qdrant.yaml").write_text(text)
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_settings(tmp_path)


def test_config_qdrant_servers_own_file_is_still_left_alone(tmp_path):
    """Qdrant's own config (its storage section is one letter pair from our store) is not ours."""
    (tmp_path / "qdrant.yaml").write_text("log_level: INFO\nstorage:\n  storage_path: ./storage\n"
                                          "service:\n  http_port: 6333\n")
    assert load_settings(tmp_path) == Settings()
