"""What is checked before any weights load: the kind of model a folder holds,
the sentence-transformers pooling config, and the embedding options."""

from __future__ import annotations

import json

import pytest
import torch
from inferd.config import ServeConfig
from inferd.models.config import UnsupportedModelError
from inferd.models.default_embedding import DEFAULT_EMBEDDING_NAME, resolve_with_bundled
from inferd.models.encoder_config import model_kind
from inferd.models.encoder_loader import load_encoder
from inferd.models.encoder_tokenizer import truncated, truncated_pair
from inferd.models.pooling_config import PoolingConfig, read_pooling_config
from inferd.server.pooled_models import check_embedding_options

from tiny_encoders import minilm_folder


def write_pipeline(folder, modules, pooling=None, max_seq_length=None):
    (folder / "modules.json").write_text(json.dumps(modules))
    if pooling is not None:
        (folder / "1_Pooling").mkdir()
        (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    if max_seq_length:
        (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length}))


TRANSFORMER = {"path": "", "type": "sentence_transformers.models.Transformer"}
POOLING = {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}
NORMALIZE = {"path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}


def test_the_bundled_minilm_pools_mean_normalized_up_to_256_tokens():
    assert read_pooling_config(minilm_folder()) == PoolingConfig("mean", normalize=True, max_tokens=256)
    assert resolve_with_bundled("all-minilm")[0] == DEFAULT_EMBEDDING_NAME


@pytest.mark.parametrize("pooling,expected", [
    ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, PoolingConfig("cls", False, 512)),
    ({"pooling_mode": "lasttoken"}, PoolingConfig("last", False, 512)),
    ({"pooling_mode_lasttoken": True}, PoolingConfig("last", False, 512)),
])
def test_pooling_modes_in_both_spellings(tmp_path, pooling, expected):
    write_pipeline(tmp_path, [TRANSFORMER, POOLING], pooling, max_seq_length=512)
    assert read_pooling_config(tmp_path) == expected


def test_a_folder_without_a_pipeline_pools_its_first_token_normalized(tmp_path):
    assert read_pooling_config(tmp_path) == PoolingConfig("cls", normalize=True, max_tokens=None)


@pytest.mark.parametrize("modules,pooling,message", [
    ([TRANSFORMER, POOLING, {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}],
     {"pooling_mode_mean_tokens": True}, "inferd runs only Normalize, Pooling, Transformer modules"),
    ([TRANSFORMER, POOLING], {"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True}, "is not supported"),
])
def test_pipelines_inferd_cannot_run_are_refused(tmp_path, modules, pooling, message):
    write_pipeline(tmp_path, modules, pooling)
    with pytest.raises(UnsupportedModelError, match=message):
        read_pooling_config(tmp_path)


def test_model_kinds():
    assert model_kind({"model_type": "bert", "architectures": ["BertModel"]}) == "embed"
    assert model_kind({"model_type": "xlm-roberta", "architectures": ["XLMRobertaForSequenceClassification"]}) == "rerank"
    assert model_kind({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}) == "chat"
    assert model_kind({"model_type": "modernbert", "architectures": ["ModernBertModel"]}) == "embed"
    assert model_kind({"model_type": "roformer", "architectures": ["RoFormerForSequenceClassification"]}) == "rerank"


RUN = ("is an encoder whose layers differ from BERT's, which inferd does not run; encoders of BERT's shape run: "
       "bert, camembert, roberta, roformer, xlm-roberta")


@pytest.mark.parametrize(("config", "message"), [
    ({"model_type": "modernbert"},
     f"model_type 'modernbert' (ModernBERT: local (windowed) and global attention layers in turn, gated MLPs) {RUN}"),
    ({"model_type": "nomic_bert"}, "model_type 'nomic_bert' (nomic-bert: gated MLPs, rotary positions as its "
                                   f"checkpoint's own code defines them) {RUN}"),
    ({"model_type": "new"}, "model_type 'new' (gte-new: gated MLPs, scaled rotary positions as its checkpoint's own "
                            f"code defines them) {RUN}"),
    ({"model_type": "xlm-roberta", "position_embedding_type": "rotary"},
     "position_embedding_type 'rotary' is not supported for model_type 'xlm-roberta' "
     "(absolute only; rotary positions run as model_type 'roformer')"),
], ids=["modernbert", "nomic-bert", "gte-new", "jina-v3-style"])
def test_encoders_not_of_berts_shape_are_refused_saying_so(tmp_path, config, message):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Model"], "vocab_size": 8, **config}))
    with pytest.raises(UnsupportedModelError) as error:
        load_encoder("rotary", tmp_path, torch.float32, torch.device("cpu"))
    assert str(error.value) == message


def test_embedding_options_are_checked_before_loading(tiny_model_dir):
    assert check_embedding_options(ServeConfig(model="all-minilm-l6-v2", pooling="max")) is True
    assert check_embedding_options(ServeConfig(model=str(tiny_model_dir), pooling="last")) is False
    with pytest.raises(ValueError, match="--pooling cls is not one of none, mean, last"):
        check_embedding_options(ServeConfig(model=str(tiny_model_dir), pooling="cls"))
    with pytest.raises(ValueError, match="is not an encoder"):
        check_embedding_options(ServeConfig(model=str(tiny_model_dir), embedding_model=[str(tiny_model_dir)]))
    with pytest.raises(ValueError, match="--dtype 'fp8'"):
        check_embedding_options(ServeConfig(model=str(tiny_model_dir), embedding_dtype="fp8"))


def test_truncation_keeps_the_closing_special_token_and_cuts_documents_not_queries():
    assert truncated([101, 1, 2, 3, 4, 102], 4, trailing_specials=1) == [101, 1, 2, 102]
    ids, types, sequences = [101, 7, 8, 102, 1, 2, 3, 102], [0, 0, 0, 0, 1, 1, 1, 1], [None, 0, 0, None, 1, 1, 1, None]
    assert truncated_pair(ids, types, sequences, 6) == ([101, 7, 8, 102, 1, 102], [0, 0, 0, 0, 1, 1])
    assert truncated_pair(ids, types, sequences, 4) is None  # only the query and its specials would be left
