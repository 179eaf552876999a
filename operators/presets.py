"""Model presets: the paper's Table IV models and the published models users plan with.

Every published preset names its source (the model card or paper) and its parameter count there
in :data:`PRESET_SOURCES`; tests/test_presets.py checks :func:`operators.partition.model_params`
against each (within 0.5%). ``seq_len`` is the *pretraining* context length, not the longest
context the released checkpoint accepts. The published models are priced with one flash-attention
kernel (what a Megatron-Core / Transformer Engine run uses today) and Megatron's two MP
all-reduces per layer and direction. docs/models.md tabulates every preset.
"""

from __future__ import annotations

from trainsim.operators.spec import Attention, Mlp, ModelSpec, Norm, Position


def _llama(name: str, hidden: int, heads: int, kv_heads: int, layers: int, seq_len: int, vocab: int,
           ffn: int) -> ModelSpec:
    """A LLaMA-family decoder: RMSNorm, SwiGLU, RoPE, no linear biases, untied embeddings, no dropout
    (attention_dropout 0.0 in every card's config)."""
    return ModelSpec(name, hidden=hidden, heads=heads, kv_heads=kv_heads, layers=layers, seq_len=seq_len,
                     vocab=vocab, ffn_hidden=ffn, norm=Norm.RMSNORM, mlp=Mlp.SWIGLU, position=Position.ROPE,
                     tied_embeddings=False, bias=False, attention=Attention.FLASH, dropout=False,
                     fwd_mp_syncs=2, bwd_mp_syncs=2)


MODEL_PRESETS: dict[str, ModelSpec] = {
    # Table IV. The "LLaMA" and "Llemma" configurations keep GPT-NeoX's GeLU 4d MLP.
    "gpt-20b": ModelSpec("gpt-20b", hidden=6144, heads=64, layers=44, seq_len=2048,
                         norm=Norm.LAYERNORM, attention=Attention.FUSED_SOFTMAX,
                         fwd_mp_syncs=1, bwd_mp_syncs=2),
    "llama-13b": ModelSpec("llama-13b", hidden=5120, heads=40, layers=40, seq_len=2048,
                           norm=Norm.RMSNORM, attention=Attention.FUSED_SOFTMAX,
                           fwd_mp_syncs=2, bwd_mp_syncs=2),
    "llemma-7b": ModelSpec("llemma-7b", hidden=4096, heads=32, layers=32, seq_len=4096,
                           norm=Norm.RMSNORM, attention=Attention.FLASH,
                           fwd_mp_syncs=2, bwd_mp_syncs=2),
    # Published models. Architecture from the config.json / paper named in PRESET_SOURCES.
    #
    # Llama 2 7B: https://huggingface.co/meta-llama/Llama-2-7b-hf (config.json; paper
    # arXiv:2307.09288 Table 1: 4k context). Card: 6,738,417,664 (HF safetensors total; it includes
    # 32 x 64 RoPE inv_freq buffer entries, so 6,738,415,616 trainable). Multi-head (kv = heads).
    "llama2-7b": _llama("llama2-7b", hidden=4096, heads=32, kv_heads=32, layers=32, seq_len=4096,
                        vocab=32000, ffn=11008),
    # Llama 2 70B: https://huggingface.co/meta-llama/Llama-2-70b-hf. Card: 68,976,653,312 (HF
    # safetensors total, incl. 80 x 64 inv_freq entries). GQA with 8 kv heads.
    "llama2-70b": _llama("llama2-70b", hidden=8192, heads=64, kv_heads=8, layers=80, seq_len=4096,
                         vocab=32000, ffn=28672),
    # Llama 3 8B: https://huggingface.co/meta-llama/Meta-Llama-3-8B (paper arXiv:2407.21783 Table 3;
    # 8K pretraining context). Card: 8,030,261,248 (HF safetensors total). Vocab 128,256 (128K + specials).
    "llama3-8b": _llama("llama3-8b", hidden=4096, heads=32, kv_heads=8, layers=32, seq_len=8192,
                        vocab=128256, ffn=14336),
    # Llama 3 70B: https://huggingface.co/meta-llama/Meta-Llama-3-70B. Card: 70,553,706,496.
    "llama3-70b": _llama("llama3-70b", hidden=8192, heads=64, kv_heads=8, layers=80, seq_len=8192,
                         vocab=128256, ffn=28672),
    # Llama 3.1 405B: https://huggingface.co/meta-llama/Llama-3.1-405B (paper Table 3: 126 layers,
    # 8 kv heads; pretrained at 8K, then extended to 128K). Card: 405,853,388,800 (HF safetensors
    # total). The first HF upload's config said 16 kv heads (duplicated); the paper and the current
    # checkpoint have 8.
    "llama3-405b": _llama("llama3-405b", hidden=16384, heads=128, kv_heads=8, layers=126, seq_len=8192,
                          vocab=128256, ffn=53248),
    # Mistral 7B v0.1: https://huggingface.co/mistralai/Mistral-7B-v0.1 (paper arXiv:2310.06825
    # Table 1: context_len 8192, window_size 4096). seq_len is the paper's 8192 training context
    # (config.json's max_position_embeddings 32768 is the RoPE limit, not the training context).
    # Card: 7,241,732,096 (HF safetensors total). Sliding-window attention (window 4096) is priced
    # as full causal flash attention: an over-estimate of attention work at 8192 tokens.
    "mistral-7b": _llama("mistral-7b", hidden=4096, heads=32, kv_heads=8, layers=32, seq_len=8192,
                         vocab=32000, ffn=14336),
    # GPT-3 175B: https://arxiv.org/abs/2005.14165 Table 2.1 (n_params 175.0B, 96 layers, d_model
    # 12288, 96 heads, context 2048). GPT-2's architecture: LayerNorm, GeLU 4d MLP, learned
    # positions, biases, tied input/output embedding, 50,257-token BPE vocabulary. GPT-3's
    # alternating locally banded sparse attention layers are priced as dense flash attention.
    "gpt3-175b": ModelSpec("gpt3-175b", hidden=12288, heads=96, layers=96, seq_len=2048, vocab=50257,
                           ffn_hidden=4 * 12288, norm=Norm.LAYERNORM, mlp=Mlp.GELU, rotary=False,
                           position=Position.LEARNED, tied_embeddings=True, bias=True,
                           attention=Attention.FLASH, fwd_mp_syncs=2, bwd_mp_syncs=2),
    # Nemotron-4 340B: https://arxiv.org/abs/2406.11704 (Table 1: 96 layers, hidden 18432, 96 heads,
    # 8 kv heads, seq 4096, vocab 256,000; "9.4 billion embedding parameters and 331.6 billion
    # non-embedding parameters": card 341.0e9; the HF card https://huggingface.co/nvidia/Nemotron-4-340B-Base
    # rounds to 340B). MLP: two matrices (18432 -> 73728, 73728 -> 18432) with squared-ReLU
    # activation, priced as the GeLU operator. LayerNorm (NeMo's layernorm1p, with a bias), RoPE on
    # half of each head (rope_percent 0.5; priced as full RoPE), no linear biases, untied embeddings.
    "nemotron4-340b": ModelSpec("nemotron4-340b", hidden=18432, heads=96, kv_heads=8, layers=96,
                                seq_len=4096, vocab=256000, ffn_hidden=73728, norm=Norm.LAYERNORM,
                                mlp=Mlp.GELU, position=Position.ROPE, tied_embeddings=False, bias=False,
                                attention=Attention.FLASH, dropout=False,  # the report: "no dropout"
                                fwd_mp_syncs=2, bwd_mp_syncs=2),
}

#: Each published preset's source (model card, else paper) and the parameter count it gives.
#: Hugging Face "safetensors total" counts are exact (Llama 2's include the rotary ``inv_freq``
#: buffers, 64 entries a layer); GPT-3's and Nemotron-4's are the papers' figures, to 0.1B.
PRESET_SOURCES: dict[str, tuple[str, float]] = {
    "llama2-7b": ("https://huggingface.co/meta-llama/Llama-2-7b-hf", 6_738_417_664),
    "llama2-70b": ("https://huggingface.co/meta-llama/Llama-2-70b-hf", 68_976_653_312),
    "llama3-8b": ("https://huggingface.co/meta-llama/Meta-Llama-3-8B", 8_030_261_248),
    "llama3-70b": ("https://huggingface.co/meta-llama/Meta-Llama-3-70B", 70_553_706_496),
    "llama3-405b": ("https://huggingface.co/meta-llama/Llama-3.1-405B", 405_853_388_800),
    "mistral-7b": ("https://huggingface.co/mistralai/Mistral-7B-v0.1", 7_241_732_096),
    "gpt3-175b": ("https://arxiv.org/abs/2005.14165", 175.0e9),
    "nemotron4-340b": ("https://arxiv.org/abs/2406.11704", 341.0e9),
}
