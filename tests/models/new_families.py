"""The families users bring next (issue 61), tiny and random-initialized (no downloads).

State-space hybrids (Granite 4 hybrid, Bamba, Falcon-H1, Jamba, Mamba, Mamba-2,
RecurrentGemma), DeepSeek-V3, two multimodal towers (Granite Speech, Granite Vision as
LLaVA-Next), convolutional and windowed vision models (MobileNetV2, EfficientNet, Swin,
ConvNeXt-V2), speech encoders (wav2vec2, HuBERT), DETR (when it builds without timm) and two
encoder-decoders (Marian, Pegasus). Each is built from a config object in code at one small
size (hidden 64, 2 layers, 4 heads, vocab 256, 16 tokens, batch 1, eval mode, a fixed seed),
so a failure names a missing lowering, not a size.

`FAMILIES = {name: builder}`; a builder returns `(module, example_inputs)` and the export is
the ordinary `torch.export.export(module, inputs)`.
"""

from __future__ import annotations

from typing import Callable

import torch

SEED = 0
HIDDEN = 64
HEADS = 4
VOCAB = 256
TOKENS = 16
COMMON = dict(vocab_size=VOCAB, pad_token_id=0, bos_token_id=1, eos_token_id=2)
LM = dict(hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=2,
          num_attention_heads=HEADS, num_key_value_heads=2, max_position_embeddings=64,
          use_cache=False, **COMMON)
MAMBA2 = dict(mamba_n_heads=4, mamba_d_head=32, mamba_n_groups=1, mamba_d_state=16,
              mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=8)


class Out(torch.nn.Module):
    """`model(**inputs)` -> its first output tensor (logits or the last hidden state)."""

    def __init__(self, model: torch.nn.Module, field: str, names: tuple[str, ...] = (),
                 **fixed) -> None:
        super().__init__()
        self.model, self.field, self.names, self.fixed = model, field, names, fixed

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        named = dict(zip(self.names, args))
        return getattr(self.model(*args[len(named):], **named, **self.fixed), self.field)


def _ids(n: int = TOKENS) -> torch.Tensor:
    g = torch.Generator().manual_seed(SEED)
    return torch.randint(3, VOCAB, (1, n), generator=g, dtype=torch.long)


def _image(size: int, channels: int = 3) -> torch.Tensor:
    g = torch.Generator().manual_seed(SEED)
    return torch.randn(1, channels, size, size, generator=g)


def _model(cls, config) -> torch.nn.Module:
    torch.manual_seed(SEED)
    return cls(config).eval()


def _lm(cls_name: str, cfg_name: str, **kw):
    def build():
        import transformers as tf
        config = getattr(tf, cfg_name)(**{**LM, **kw})
        return Out(_model(getattr(tf, cls_name), config), "logits"), (_ids(),)
    return build


def _mamba(cls_name: str, cfg_name: str, **kw):
    def build():
        import transformers as tf
        config = getattr(tf, cfg_name)(hidden_size=HIDDEN, num_hidden_layers=2,
                                       use_cache=False, **COMMON, **kw)
        return Out(_model(getattr(tf, cls_name), config), "logits"), (_ids(),)
    return build


def _vision(cls_name: str, cfg_name: str, size: int, field="last_hidden_state", **kw):
    def build():
        import transformers as tf
        config = getattr(tf, cfg_name)(**kw)
        return Out(_model(getattr(tf, cls_name), config), field), (_image(size),)
    return build


def _audio(cls_name: str, cfg_name: str):
    def build():
        import transformers as tf
        config = getattr(tf, cfg_name)(
            hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=HEADS,
            intermediate_size=128, conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3),
            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
            vocab_size=32)
        g = torch.Generator().manual_seed(SEED)
        wave = torch.randn(1, 400, generator=g)
        return Out(_model(getattr(tf, cls_name), config), "last_hidden_state"), (wave,)
    return build


def _seq2seq(cls_name: str, cfg_name: str):
    def build():
        import transformers as tf
        config = getattr(tf, cfg_name)(
            d_model=HIDDEN, encoder_layers=2, decoder_layers=2, encoder_attention_heads=HEADS,
            decoder_attention_heads=HEADS, encoder_ffn_dim=128, decoder_ffn_dim=128,
            max_position_embeddings=64, use_cache=False, decoder_start_token_id=0, **COMMON)
        dec = _ids(8)
        model = _model(getattr(tf, cls_name), config)
        return Out(model, "logits", ("input_ids", "decoder_input_ids")), (_ids(), dec)
    return build


def _granite_vision():
    import transformers as tf
    vision = tf.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=2, image_size=32, patch_size=16)
    text = tf.GraniteConfig(**LM)
    config = tf.LlavaNextConfig(vision_config=vision, text_config=text, image_token_index=3,
                                image_grid_pinpoints=[[32, 32]], image_seq_length=4,
                                vision_feature_layer=-1)
    model = _model(tf.LlavaNextForConditionalGeneration, config)
    ids = _ids()
    ids[0, 1:1 + 10] = 3    # base features (4) + one tile (2x2) + a newline per tile row
    g = torch.Generator().manual_seed(SEED)
    pixels = torch.randn(1, 2, 3, 32, 32, generator=g)
    return Out(model, "logits", ("input_ids", "pixel_values"), image_sizes=[[32, 32]]), \
        (ids, pixels)


def _granite_speech():
    import transformers as tf
    enc = tf.GraniteSpeechEncoderConfig(input_dim=16, num_layers=2, hidden_dim=64,
                                        feedforward_mult=2, num_heads=4, dim_head=16,
                                        output_dim=32, context_size=8, conv_kernel_size=3)
    proj = tf.Blip2QFormerConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                 intermediate_size=128, encoder_hidden_size=64)
    text = tf.GraniteConfig(**LM)
    config = tf.GraniteSpeechConfig(encoder_config=enc, projector_config=proj,
                                    text_config=text, audio_token_index=3, window_size=4,
                                    downsample_rate=2)
    model = _model(tf.GraniteSpeechForConditionalGeneration, config)
    g = torch.Generator().manual_seed(SEED)
    feats = torch.randn(1, 8, 16, generator=g)
    ids = _ids()
    ids[0, 1:1 + 4] = 3
    return Out(model, "logits", ("input_ids", "input_features")), (ids, feats)


def _detr():
    import transformers as tf
    backbone = tf.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                               layer_type="basic", out_features=["stage2"])
    config = tf.DetrConfig(use_timm_backbone=False, backbone_config=backbone, d_model=32,
                           encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                           decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                           num_queries=8, use_pretrained_backbone=False)
    return Out(_model(tf.DetrModel, config), "last_hidden_state"), (_image(64),)


GRANITE4 = dict(layer_types=["mamba", "attention"], num_local_experts=4, num_experts_per_tok=2,
                shared_intermediate_size=128, **MAMBA2)


def granite4_hybrid(dtype: torch.dtype = torch.float32):
    """Granite 4 hybrid prefill (Mamba-2 layer, attention layer, MoE with the default experts:
    transformers' grouped_mm_fallback) in `dtype`: (Out(model), (input_ids,))."""
    import transformers as tf
    config = tf.GraniteMoeHybridConfig(**LM, **GRANITE4)
    model = _model(tf.GraniteMoeHybridForCausalLM, config).to(dtype)
    return Out(model, "logits"), (_ids(),)


class HybridDecodeStep(torch.nn.Module):
    """One decode step of a hybrid model over transformers' StaticCache, which holds a conv
    and an SSM state per Mamba layer and K/V slots per attention layer. transformers' export
    recipe (`TorchExportableModuleWithStaticCache`) registers only K/V caches, so this one
    registers every state as a buffer (the step writes them in place: they come back under
    their names). A prompt of `prompt` tokens is run first, so the states are not zeros."""

    def __init__(self, model: torch.nn.Module, slots: int = 32, prompt: int = 5) -> None:
        super().__init__()
        from transformers.cache_utils import StaticCache
        self.model = model
        self.cache = StaticCache(config=model.config, max_cache_len=slots)
        with torch.no_grad():
            model(input_ids=_ids(prompt), past_key_values=self.cache,
                  cache_position=torch.arange(prompt), use_cache=True)
        for i, layer in enumerate(self.cache.layers):
            states = {"key_cache": getattr(layer, "keys", None),
                      "value_cache": getattr(layer, "values", None),
                      "cumulative_length": getattr(layer, "cumulative_length", None)}
            for kind in ("conv_states", "recurrent_states"):
                for j, t in dict(getattr(layer, kind, None) or {}).items():
                    states[f"{kind}_{j}"] = t
            for kind, t in states.items():
                if isinstance(t, torch.Tensor):
                    self.register_buffer(f"{kind}_{i}", t, persistent=False)

    def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, cache_position=cache_position,
                          past_key_values=self.cache, use_cache=True).logits


def granite4_hybrid_decode(dtype: torch.dtype = torch.float32, prompt: int = 5):
    """(HybridDecodeStep, (input_ids [1, 1], cache_position [1] = prompt)); export strict."""
    import transformers as tf
    config = tf.GraniteMoeHybridConfig(**{**LM, "use_cache": True}, **GRANITE4)
    model = _model(tf.GraniteMoeHybridForCausalLM, config).to(dtype)
    step = HybridDecodeStep(model, prompt=prompt).eval()
    return step, (torch.tensor([[7]]), torch.tensor([prompt]))


def export_kwargs(name: str) -> dict:
    """strict export for the decode steps (the caches are reached through the cache object;
    non-strict export would lift them as constants), as hf.py's decode steps."""
    return {"strict": True} if "_decode" in name else {}


def _families() -> dict[str, Callable[[], tuple[torch.nn.Module, tuple]]]:
    return {
        "granite4_hybrid": granite4_hybrid,
        "granite4_hybrid_bf16": lambda: granite4_hybrid(torch.bfloat16),
        "granite4_hybrid_decode": granite4_hybrid_decode,
        "granite4_hybrid_decode_bf16": lambda: granite4_hybrid_decode(torch.bfloat16),
        "bamba": _lm("BambaForCausalLM", "BambaConfig", attn_layer_indices=[1], **MAMBA2),
        "falcon_h1": _lm("FalconH1ForCausalLM", "FalconH1Config", mamba_d_ssm=128, **MAMBA2),
        "jamba": _lm("JambaForCausalLM", "JambaConfig", num_experts=4, num_experts_per_tok=2,
                     attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2,
                     expert_layer_offset=1, use_mamba_kernels=False, mamba_d_state=16),
        "mamba": _mamba("MambaForCausalLM", "MambaConfig", state_size=16),
        "mamba2": _mamba("Mamba2ForCausalLM", "Mamba2Config", num_heads=4, head_dim=32,
                         state_size=16, n_groups=1, chunk_size=8),
        "recurrent_gemma": _lm("RecurrentGemmaForCausalLM", "RecurrentGemmaConfig",
                               lru_width=64, attention_window_size=8, conv1d_width=4,
                               block_types=["recurrent", "attention"]),
        "deepseek_v3": _lm("DeepseekV3ForCausalLM", "DeepseekV3Config",
                           moe_intermediate_size=32, n_routed_experts=4, n_shared_experts=1,
                           num_experts_per_tok=2, n_group=2, topk_group=1, kv_lora_rank=16,
                           q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=8,
                           v_head_dim=16, first_k_dense_replace=1,
                           num_key_value_heads=HEADS),
        "granite_speech": _granite_speech,
        "granite_vision": _granite_vision,
        "mobilenet_v2": _vision("MobileNetV2Model", "MobileNetV2Config", 32,
                                depth_multiplier=0.25, image_size=32),
        "efficientnet": _vision("EfficientNetModel", "EfficientNetConfig", 32,
                                image_size=32, width_coefficient=0.25, depth_coefficient=0.25,
                                hidden_dim=320),
        "swin": _vision("SwinModel", "SwinConfig", 32, image_size=32, patch_size=4,
                        embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4),
        "convnext_v2": _vision("ConvNextV2Model", "ConvNextV2Config", 32,
                               hidden_sizes=[16, 32], depths=[1, 1], num_stages=2),
        "wav2vec2": _audio("Wav2Vec2Model", "Wav2Vec2Config"),
        "hubert": _audio("HubertModel", "HubertConfig"),
        "detr": _detr,
        "marian": _seq2seq("MarianMTModel", "MarianConfig"),
        "pegasus": _seq2seq("PegasusForConditionalGeneration", "PegasusConfig"),
    }


FAMILIES: dict[str, Callable[[], tuple[torch.nn.Module, tuple]]] = _families()
