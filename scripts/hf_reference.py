#!/usr/bin/env python3
"""The reference side of sweep's fidelity check: the same training burst, written the way a
PyTorch + Hugging Face user writes it, measured the way sweep measures.

    # one point, JSON on stdout
    python3 scripts/hf_reference.py point --model gpt2-medium --batch 8 --seq 1024 \\
        --precision bf16-amp --checkpointing block
    # every `ok` CUDA row of a sweep's results.csv, each in its own process, as a Markdown table
    python3 scripts/hf_reference.py compare results/fidelity > docs/fidelity-table.md

What the reference does, per point (fresh process, CUDA):
  * transformers model built from the checkpoint's configuration (no download), SDPA attention,
    .to(cuda), .train(); gradient_checkpointing_enable() for checkpointing "block";
  * weights nf4 | fp4 (QLoRA: from_pretrained with BitsAndBytesConfig(load_in_4bit=True,
    bnb_4bit_quant_type, bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype bf16, fp16
    under fp16-amp) in that dtype, then peft.prepare_model_for_kbit_training when training;
    with --adapter lora);
  * weights full | int8 (from_pretrained with BitsAndBytesConfig(load_in_8bit=True): the
    linear layers become bitsandbytes' Linear8bitLt; use with --adapter lora);
  * precision fp32 | fp16-amp (torch.autocast + torch.amp.GradScaler) | bf16-amp (autocast) |
    bf16 (model.to(bfloat16) after the move; a Llama-family decoder cast first, as
    from_pretrained(dtype=torch.bfloat16) loads it);
  * optimizer torch.optim.AdamW (PyTorch's default implementation choice), fused AdamW, SGD
    (momentum 0.9), torch.optim.Adafactor, or bitsandbytes' AdamW (8-bit, paged 8-bit, paged
    32-bit, as Trainer builds them; paged_bytes: their state in unified memory), lr 1e-3,
    weight decay 0.01;
  * synthetic batches as sweep's: uniform token ids, labels = inputs (GPT-2), random labels
    (T5), Gaussian log-mel features and random class labels (Whisper); accumulation k with
    the loss scaled by 1/k;
  * peak = torch.cuda.max_memory_allocated / max_memory_reserved since before the model was
    built; step time = median over repetitions of the mean CUDA-event time of `steps` steps,
    after `warmup` steps.
"""
import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys

# name -> (family, configuration); the checkpoints' published configurations (see models/zoo.cc),
# and the zoo's test models (the configurations tests/fixtures/make_reference.py builds).
ZOO = {
    "gpt2": ("gpt2", dict(n_embd=768, n_layer=12, n_head=12)),
    "gpt2-medium": ("gpt2", dict(n_embd=1024, n_layer=24, n_head=16)),
    "gpt2-large": ("gpt2", dict(n_embd=1280, n_layer=36, n_head=20)),
    "gpt2-xl": ("gpt2", dict(n_embd=1600, n_layer=48, n_head=25)),
    "t5-small": ("t5", dict(d_model=512, d_ff=2048, num_layers=6, num_heads=8)),
    "t5-base": ("t5", dict(d_model=768, d_ff=3072, num_layers=12, num_heads=12)),
    "t5-large": ("t5", dict(d_model=1024, d_ff=4096, num_layers=24, num_heads=16)),
    # WhisperForConditionalGeneration, as the Hub's checkpoints are (the widths of their
    # config.json; WhisperConfig's defaults for the rest: vocab 51865, labels up to 448).
    "whisper-tiny": ("whisper", dict(d_model=384, layers=4, heads=6)),
    "whisper-base": ("whisper", dict(d_model=512, layers=6, heads=8)),
    "whisper-small": ("whisper", dict(d_model=768, layers=12, heads=12)),
    "whisper-medium": ("whisper", dict(d_model=1024, layers=24, heads=16)),
    "whisper-large-v3": ("whisper", dict(d_model=1280, layers=32, heads=20, num_mel_bins=128,
                                         vocab_size=51866)),
    "whisper-large-v3-turbo": ("whisper", dict(d_model=1280, layers=32, heads=20, num_mel_bins=128,
                                               vocab_size=51866, decoder_layers=4)),
    # The encoder with WhisperForAudioClassification's head (whisper-*-cls in the zoo).
    "whisper-tiny-cls": ("whisper-cls", dict(d_model=384, layers=4, heads=6)),
    "whisper-base-cls": ("whisper-cls", dict(d_model=512, layers=6, heads=8)),
    "whisper-small-cls": ("whisper-cls", dict(d_model=768, layers=12, heads=12)),
    "whisper-medium-cls": ("whisper-cls", dict(d_model=1024, layers=24, heads=16)),
    "whisper-large-v3-cls": ("whisper-cls", dict(d_model=1280, layers=32, heads=20, num_mel_bins=128)),
    "gpt2-test": ("gpt2", dict(vocab_size=1024, n_positions=256, n_embd=64, n_layer=2, n_head=4,
                               bos_token_id=1023, eos_token_id=1023)),
    "t5-test": ("t5", dict(vocab_size=1024, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                           num_decoder_layers=2, num_heads=4)),
    "whisper-test": ("whisper-cls", dict(num_mel_bins=16, d_model=64, layers=2, heads=4,
                                         max_source_positions=200)),
    "whisper-s2s-test": ("whisper", dict(num_mel_bins=16, d_model=64, layers=2, heads=4,
                                         max_source_positions=200, max_target_positions=64,
                                         vocab_size=1024, pad_token_id=1022, bos_token_id=1022,
                                         eos_token_id=1022, decoder_start_token_id=1023)),
}


# PEFT's default LoRA target modules per family (peft/utils/constants.py
# TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING; Whisper has no entry there, so its users
# name q_proj and v_proj as for BART, its architecture's ancestor).
LORA_TARGETS = {"gpt2": ["c_attn"], "t5": ["q", "v"], "whisper": ["q_proj", "v_proj"],
                "whisper-cls": ["q_proj", "v_proj"],
                "llama": ["q_proj", "v_proj"], "phi3": ["qkv_proj"]}

# The decoders sweep builds from a config.json (models/hf_config.cc), by architectures[0].
DECODERS = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "llama", "Qwen3ForCausalLM": "llama",
            "MistralForCausalLM": "llama", "Phi3ForCausalLM": "phi3"}
CATALOGUE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "catalogue")


def config_file(name):
    """The config.json a model name means: a path ending in .json, or a catalogue Hub id."""
    if name.endswith(".json"):
        return name
    for org in sorted(os.listdir(CATALOGUE)):  # the Hub id, or sweep's lower-case name
        for model in sorted(os.listdir(os.path.join(CATALOGUE, org))):
            if name in (f"{org}/{model}", model.lower()):
                return os.path.join(CATALOGUE, org, model, "config.json")
    return None


def build_family(name):
    """The family of a zoo name or a config.json's model, as sweep names it."""
    if name in ZOO:
        return ZOO[name][0]
    with open(config_file(name)) as f:
        arch = json.load(f)["architectures"][0]
    return DECODERS.get(arch, "t5" if arch.startswith("T5") else arch)


def build_from_config(path):
    """The model transformers builds from a config.json (AutoConfig's class for its
    architectures[0], no download), with SDPA attention."""
    import transformers as tf
    with open(path) as f:
        cfg = json.load(f)
    arch = cfg["architectures"][0]
    cls = getattr(tf, arch)
    config = cls.config_class(**dict(cfg, attn_implementation="sdpa"))
    return DECODERS.get(arch, "t5" if arch.startswith("T5") else arch), cls(config)


def build(name):
    import transformers as tf
    if name not in ZOO:
        return build_from_config(config_file(name))
    family, cfg = ZOO[name]
    if family == "gpt2":
        return family, tf.GPT2LMHeadModel(tf.GPT2Config(**cfg, attn_implementation="sdpa"))
    if family == "t5":
        return family, tf.T5ForConditionalGeneration(
            tf.T5Config(**cfg, decoder_start_token_id=0, attn_implementation="sdpa"))
    cfg = dict(cfg)
    layers, heads, d = cfg.pop("layers"), cfg.pop("heads"), cfg["d_model"]
    cfg = dict(dict(encoder_layers=layers, encoder_attention_heads=heads, decoder_layers=layers,
                    decoder_attention_heads=heads, encoder_ffn_dim=4 * d, decoder_ffn_dim=4 * d),
               **cfg, attn_implementation="sdpa")
    if family == "whisper-cls":
        return family, tf.WhisperForAudioClassification(tf.WhisperConfig(**dict(cfg, num_labels=2)))
    return family, tf.WhisperForConditionalGeneration(tf.WhisperConfig(**cfg))


def batch(family, model, a, gen, device):
    import torch
    if family in ("gpt2", "llama", "phi3"):
        ids = torch.randint(model.config.vocab_size, (a.batch, a.seq), generator=gen).to(device)
        return dict(input_ids=ids, labels=ids), a.batch * a.seq
    if family == "t5":
        v = model.config.vocab_size
        ids = torch.randint(v, (a.batch, a.seq), generator=gen).to(device)
        labels = torch.randint(v, (a.batch, a.target_seq), generator=gen).to(device)
        return dict(input_ids=ids, labels=labels), a.batch * (a.seq + a.target_seq)
    frames = round(a.audio_s * 100)
    feats = torch.randn((a.batch, model.config.num_mel_bins, frames), generator=gen).to(device)
    if a.precision == "bf16":
        feats = feats.to(torch.bfloat16)
    if family == "whisper-cls":
        labels = torch.randint(2, (a.batch,), generator=gen).to(device)
        return dict(input_features=feats, labels=labels), a.batch * ((frames + 1) // 2)
    # Seq2SeqTrainer's batch: the features and the labels (the decoder's inputs are shifted
    # from them inside the model).
    labels = torch.randint(model.config.vocab_size, (a.batch, a.target_seq), generator=gen).to(device)
    return dict(input_features=feats, labels=labels), a.batch * ((frames + 1) // 2 + a.target_seq)


def optimizer(name, params):
    import torch
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
    if name == "adamw-fused":
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, fused=True)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, weight_decay=0.01)
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=1e-3, weight_decay=0.01)
    if name in ("adamw8bit", "paged-adamw8bit", "paged-adamw32bit"):
        # transformers' _get_bitsandbytes_optimizer for adamw_bnb_8bit, paged_adamw_8bit and
        # paged_adamw_32bit: bnb.optim.AdamW(optim_bits=8 or 32, is_paged=...).
        import bitsandbytes as bnb
        return bnb.optim.AdamW(params, lr=1e-3, weight_decay=0.01,
                               optim_bits=32 if name == "paged-adamw32bit" else 8,
                               is_paged=name.startswith("paged"))
    raise SystemExit(f"unknown optimizer {name}")


def paged_bytes(opt):
    """The optimizer state bitsandbytes keeps in unified memory (its tensors marked is_paged)."""
    if opt is None:
        return 0
    return sum(t.nbytes for state in opt.state.values() for t in state.values()
               if getattr(t, "is_paged", False))


def lora(model, family, a):
    """peft.get_peft_model with LoraConfig's defaults but for the point's settings. PEFT freezes
    every base parameter (bias="none", no modules_to_save: Whisper's classifier head too), keeps
    bf16 adapters in fp32 (autocast_adapter_dtype), and, when checkpointing is already on,
    makes the input embeddings' output require grad (enable_input_require_grads)."""
    import peft
    targets = getattr(a, "lora_targets", None) or LORA_TARGETS[family]
    if [t.lower() for t in targets] == ["all-linear"]:  # PEFT's shorthand, a string
        targets = "all-linear"
    cfg = peft.LoraConfig(r=getattr(a, "lora_r", 8), lora_alpha=getattr(a, "lora_alpha", 8),
                          lora_dropout=getattr(a, "lora_dropout", 0.0), target_modules=targets)
    return peft.get_peft_model(model, cfg)


def load_int8(model, a, device):
    """The model as users load it in 8 bit: from_pretrained(quantization_config=
    BitsAndBytesConfig(load_in_8bit=True)) from a checkpoint (the freshly built model saved to a
    temporary directory), in the point's dtype. transformers then converts every Linear and
    GPT-2 Conv1D but the output embedding and _keep_in_fp32_modules to bitsandbytes'
    Linear8bitLt (threshold 6.0, has_fp16_weights=False). prepare_model_for_kbit_training is
    not called (see the README)."""
    import torch
    import transformers as tf
    return load_quantized(model, tf.BitsAndBytesConfig(load_in_8bit=True),
                          torch.bfloat16 if a.precision == "bf16" else torch.float32, device)


def compute_dtype_4bit(a):
    import torch
    return torch.float16 if a.precision == "fp16-amp" else torch.bfloat16


def load_4bit(model, a, device):
    """QLoRA's load: from_pretrained(quantization_config=BitsAndBytesConfig(load_in_4bit=True,
    bnb_4bit_quant_type=nf4|fp4, bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=bf16,
    fp16 under fp16-amp), dtype=the same). The same layers as in 8 bit become bitsandbytes'
    Linear4bit."""
    import transformers as tf
    dtype = compute_dtype_4bit(a)
    cfg = tf.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=a.weights,
                                bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=dtype)
    return load_quantized(model, cfg, dtype, device)


def load_quantized(model, quantization_config, dtype, device):
    import tempfile
    import torch
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        cls = type(model)
        del model
        model = cls.from_pretrained(d, quantization_config=quantization_config,
                                    device_map={"": device}, dtype=dtype)
    if device.type == "cpu":
        # On the CPU the loader reads the checkpoint file into one buffer and leaves every
        # tensor it need not convert (same dtype, not quantised) as a view into it, so the
        # whole fp32 checkpoint stays allocated (730 KB for gpt2-test). Loaded onto a GPU each
        # tensor is copied on its own and the buffer is host memory. A copy of each, as the
        # move to a GPU makes, so that the CPU fixture holds what a GPU holds.
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                if t.dtype not in (torch.int8, torch.uint8):
                    t.data = t.data.clone()
    return model


def save_checkpoint(a, path):
    """The model as sweep builds it (seeded, fp32), saved with save_pretrained: the checkpoint a
    user's from_pretrained reads (load_checkpoint)."""
    import torch
    torch.manual_seed(a.seed)
    _, model = build(a.model)
    model.save_pretrained(path)


def load_checkpoint(path, weights, device):
    """AutoModelForCausalLM.from_pretrained(path, quantization_config=BitsAndBytesConfig(...),
    device_map=device) as users call it: no dtype, so the checkpoint's (dtype="auto"); 4 bit as
    QLoRA's recipe (nf4 or fp4, double quantisation, compute dtype bf16), 8 bit with the
    defaults. Nothing is copied afterwards: on the CPU the tensors it need not convert stay views
    into the file's buffer."""
    import torch
    import transformers as tf
    if weights == "int8":
        cfg = tf.BitsAndBytesConfig(load_in_8bit=True)
    else:
        cfg = tf.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=weights,
                                    bnb_4bit_use_double_quant=True,
                                    bnb_4bit_compute_dtype=torch.bfloat16)
    return tf.AutoModelForCausalLM.from_pretrained(path, quantization_config=cfg,
                                                   device_map=device.type)


def burst(a, device, phase=None):
    """The training (or eval) loop as a user writes it. `phase(name)` returns a context manager
    around each phase (build, forward, backward, optimizer): the CPU fixtures mark phases with
    it. Returns (model, step function, tokens per step)."""
    import contextlib
    import torch
    phase = phase or (lambda name: contextlib.nullcontext())
    train = a.mode == "train"
    k = a.accumulation if train else 1
    torch.manual_seed(a.seed)
    weights = getattr(a, "weights", "full")
    checkpoint = getattr(a, "checkpoint", None)
    if checkpoint:
        # The user's load: a checkpoint on disk (saved before the burst), read by
        # from_pretrained(path, quantization_config=..., device_map) with no dtype (auto: the
        # checkpoint's), then prepare_model_for_kbit_training for 4 bit.
        with phase("load"):
            family = build_family(a.model)
            model = load_checkpoint(checkpoint, weights, device)
            if train and weights in ("nf4", "fp4"):
                import peft
                model = peft.prepare_model_for_kbit_training(
                    model, use_gradient_checkpointing=a.checkpointing == "block")
    with phase("build"):
        if not checkpoint:
            family, model = build(a.model)
        if checkpoint:
            pass  # loaded above
        elif weights == "int8":
            model = load_int8(model, a, device)
        elif weights in ("nf4", "fp4"):
            model = load_4bit(model, a, device)
        elif a.precision == "bf16" and family in ("llama", "phi3"):
            # A decoder as its users load it: from_pretrained(name, dtype=torch.bfloat16).
            model.to(torch.bfloat16)
            model.to(device)
        else:
            model.to(device)
            if a.precision == "bf16":
                model.to(torch.bfloat16)
        model.train(train)
        if train and weights in ("nf4", "fp4") and not checkpoint:
            # QLoRA's recipe; its checkpointing (reentrant, as it passes no use_reentrant) is
            # made non-reentrant again by the call below, as the Trainer's
            # gradient_checkpointing=True makes it.
            import peft
            model = peft.prepare_model_for_kbit_training(
                model, use_gradient_checkpointing=a.checkpointing == "block")
        if train and a.checkpointing == "block":
            model.gradient_checkpointing_enable()
        if getattr(a, "adapter", "none") == "lora":
            model = lora(model, family, a)
        opt = optimizer(a.optimizer, [p for p in model.parameters() if p.requires_grad]) if train else None
        scaler = torch.amp.GradScaler(device.type) if train and a.precision == "fp16-amp" else None
        amp = {"fp16-amp": torch.float16, "bf16-amp": torch.bfloat16}.get(a.precision)
        gen = torch.Generator().manual_seed(a.seed + 1)
        batches = [batch(family, model, a, gen, device) for _ in range(k)]
    # use_cache: transformers' default unless the point turns it off (Whisper's encoder has none).
    extra = {} if a.use_cache or family == "whisper-cls" else dict(use_cache=False)

    def step():
        for inputs, _ in batches:
            with phase("forward"), torch.set_grad_enabled(train):
                with torch.autocast(device.type, dtype=amp or torch.float32, enabled=amp is not None):
                    loss = model(**inputs, **extra).loss
                if train:
                    loss = loss / k
            if train:
                with phase("backward"):
                    (scaler.scale(loss) if scaler else loss).backward()
        if train:
            with phase("optimizer"):
                if scaler:
                    scaler.step(opt)
                    scaler.update()
                else:
                    opt.step()
                opt.zero_grad(set_to_none=True)

    step.optimizer = opt  # for point's paged_bytes
    return model, step, sum(t for _, t in batches)


SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                 "cudnn": "CUDNN_ATTENTION", "math": "MATH"}


def sdpa_forced(a):
    """torch.nn.attention.sdpa_kernel(backend) for --sdpa, as a user forces one kernel (SDPA
    raises "No available kernel" where that kernel cannot take the call); none for default."""
    import contextlib
    if a.sdpa == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[a.sdpa]))


def point(a):
    import time
    import torch
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    model, inner_step, tokens = burst(a, device)

    def step():
        with sdpa_forced(a):
            inner_step()
    for _ in range(a.warmup):
        step()
    times = []
    for _ in range(a.repetitions):
        if cuda:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        if cuda:
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / a.steps)
        else:
            times.append((time.perf_counter() - t0) * 1000 / a.steps)
    step_ms = statistics.median(times)
    # The same record on either device (so that the CPU runs every line of it); the peaks
    # only on CUDA (the CPU's come from tests/fixtures/).
    result = dict(model=a.model, batch=a.batch, device=device.type, precision=a.precision,
                  checkpointing=a.checkpointing, accumulation=a.accumulation,
                  optimizer=a.optimizer, use_cache=a.use_cache, adapter=a.adapter,
                  lora_r=a.lora_r, lora_alpha=a.lora_alpha, lora_dropout=a.lora_dropout,
                  lora_targets=a.lora_targets, weights=a.weights, sdpa=a.sdpa,
                  paged_bytes=paged_bytes(inner_step.optimizer), step_ms=step_ms,
                  tokens_per_s=tokens / (step_ms / 1000), torch=torch.__version__,
                  transformers=__import__("transformers").__version__)
    if cuda:
        result.update(peak_allocated_bytes=torch.cuda.max_memory_allocated(),
                      peak_reserved_bytes=torch.cuda.max_memory_reserved(),
                      device_name=torch.cuda.get_device_name())
    return result


def reference_args(r):
    """The `point` arguments that measure a results row's point with transformers."""
    args = ["--model", r["model"], "--batch", r["batch"],
            "--precision", r["precision"], "--checkpointing", r["checkpointing"],
            "--accumulation", r["accumulation"], "--optimizer", r["optimizer"],
            "--steps", r["steps"], "--warmup", r["warmup_steps"],
            "--repetitions", r["repetitions"], "--mode", r.get("mode") or "train",
            "--use_cache", {"1": "true", "0": "false"}.get(r.get("use_cache") or "1",
                                                            r.get("use_cache")),
            "--adapter", r.get("adapter") or "none",
            "--weights", r.get("weights") or "full"]
    if r.get("adapter") == "lora":
        args += ["--lora_r", r["lora_r"], "--lora_alpha", r["lora_alpha"],
                 "--lora_dropout", r["lora_dropout"], "--lora_targets", r["lora_targets"]]
    for axis in ("seq", "target_seq", "audio_s"):
        if r[axis]:
            args += ["--" + axis, r[axis]]
    return args


def point_key(args):
    """What identifies a reference point: its arguments but the timing ones (steps, warmup,
    repetitions), so that a saved measurement answers rows timed differently."""
    timing = {"--steps", "--warmup", "--repetitions"}

    def value(v):
        try:
            return repr(float(v))  # "30" and "30.0" alike
        except ValueError:
            return v
    pairs = zip(args[::2], args[1::2])
    return tuple(sorted((k, value(v)) for k, v in pairs if k not in timing))


def plan(dry_run_json):
    """The `point` arguments of every point of `sweep run CONFIG --dry-run --json`, one line
    each (for `points`): the reference measured before, or beside, sweep's own run."""
    import shlex
    for p in json.load(open(dry_run_json))["points"]:
        c = p["configuration"]
        row = {k: str(c[k]) for k in ("model", "batch", "precision", "checkpointing", "accumulation",
                                      "optimizer", "steps", "warmup_steps", "repetitions", "mode",
                                      "adapter", "weights", "lora_r", "lora_alpha", "lora_dropout",
                                      "alloc_conf")}
        row.update(use_cache="1" if c["use_cache"] else "0", lora_targets=";".join(c["lora_targets"]))
        for axis in ("seq", "target_seq", "audio_s"):
            row[axis] = str(c[axis]) if c[axis] else ""
        print(shlex.join(reference_args(row)))


def measure(args, alloc_conf):
    """One reference point in its own process: (the point's JSON, or None and the error)."""
    # Both allocator variables, as the worker sets them (PYTORCH_ALLOC_CONF wins for the
    # generic settings in torch 2.11).
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=alloc_conf, PYTORCH_ALLOC_CONF=alloc_conf)
    done = subprocess.run([sys.executable, __file__, "point"] + args, capture_output=True,
                          text=True, env=env)
    if done.returncode != 0:
        return None, (done.stderr.strip().splitlines() or ["?"])[-1]
    return json.loads(done.stdout.strip().splitlines()[-1]), None


def compare(results_dir, jobs=1, save=None, load=None):
    """A Markdown table of a results directory's ok rows against transformers at the same
    points: measured now (CUDA rows; `jobs` at once, their peaks independent, their times not),
    or read from a file `save` wrote earlier (then emulated rows are compared too)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor
    lock = threading.Lock()
    path = os.path.join(results_dir, "results.csv") if os.path.isdir(results_dir) else results_dir
    devices = ("cuda", "emulated") if load else ("cuda",)
    rows = [r for r in csv.DictReader(open(path)) if r["status"] == "ok" and r["device"] in devices
            and (r["model"] in ZOO or config_file(r["model"]))]
    saved = {}
    if load:
        for line in open(load):
            ref = json.loads(line)
            saved[point_key(ref["args"])] = ref
    if jobs > 1 and not load:
        print(f"Measured {jobs} points at a time: the peaks are each process's own, the "
              "transformers tokens/s are not timings.\n")
    print("| model | batch | input | technique | sweep peak GiB | transformers peak GiB | "
          "peak ratio | sweep tokens/s | transformers tokens/s | throughput ratio |")
    print("| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")

    def reference(r):
        args = reference_args(r)
        if load:
            ref = saved.get(point_key(args))
            return (ref, None) if ref else (None, "not in " + load)
        ref, error = measure(args, r["alloc_conf"])
        if ref:
            ref = dict(ref, jobs=jobs)
        if ref and save:
            with lock, open(save, "a") as f:
                f.write(json.dumps(dict(ref, args=args)) + "\n")
        return ref, error

    with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        for r, (ref, error) in zip(rows, pool.map(reference, rows)):
            if ref is None:
                print(f"| {r['model']} | {r['batch']} | | failed: {error} | | | | | | |", flush=True)
                continue
            print(table_row(r, ref), flush=True)


def table_row(r, ref):
    ours = float(r["peak_allocated_bytes"])
    shape = " ".join(f"{k} {r[k]}" for k in ("seq", "target_seq", "audio_s") if r[k])
    tech = f"{r['precision']} / {r['checkpointing']} / acc {r['accumulation']} / {r['optimizer']}"
    if r.get("adapter") == "lora":
        tech += f" / lora r{r['lora_r']}"
    if (r.get("weights") or "full") != "full":
        tech += f" / weights {r['weights']}"
    if r["device"] != "cuda":
        tech += f" / {r['device']}"
    mine_tps = float(r["tokens_per_s"]) if r.get("tokens_per_s") else float("nan")
    # A reference measured beside others (jobs > 1) has its own peak but no timing.
    if ref.get("jobs", 1) > 1:
        theirs = f"- ({ref['jobs']} at a time) | -"
    else:
        theirs = f"{ref['tokens_per_s']:.0f} | {mine_tps / ref['tokens_per_s']:.3f}"
    return (f"| {r['model']} | {r['batch']} | {shape} | {tech} | {ours / 2**30:.3f} | "
            f"{ref['peak_allocated_bytes'] / 2**30:.3f} | {ours / ref['peak_allocated_bytes']:.3f} | "
            f"{mine_tps:.0f} | {theirs} |")


def points(path, jobs, save):
    """Each line of `path` is one point's arguments (# comments); measured `jobs` at a time,
    each in its own process, one JSON line each (with its args, or its error) to `save`."""
    import shlex
    import threading
    from concurrent.futures import ThreadPoolExecutor
    lock = threading.Lock()
    todo = [a for a in (shlex.split(line, comments=True) for line in open(path)) if a]

    def one(args):
        ref, error = measure(args, os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))
        out = dict(ref, args=args, jobs=jobs) if ref else dict(args=args, error=error)
        with lock, open(save, "a") as f:
            f.write(json.dumps(out) + "\n")
        return out

    with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        for out in pool.map(one, todo):
            print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("point", help="measure one point, JSON on stdout")
    p.add_argument("--model", required=True,
                   help="a zoo name (" + ", ".join(sorted(ZOO)) + "), a catalogue Hub id or a config.json")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--target_seq", type=int, default=128)
    p.add_argument("--audio_s", type=float, default=30)
    p.add_argument("--precision", default="fp32", choices=["fp32", "fp16-amp", "bf16-amp", "bf16"])
    p.add_argument("--checkpointing", default="none", choices=["none", "block"])
    p.add_argument("--accumulation", type=int, default=1)
    p.add_argument("--optimizer", default="adamw",
                   choices=["adamw", "adamw-fused", "sgd", "adafactor", "adamw8bit", "paged-adamw8bit",
                            "paged-adamw32bit"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mode", default="train", choices=["train", "eval"])
    p.add_argument("--use_cache", default="true", choices=["true", "false"],
                   help="false passes use_cache=False to the model; true keeps transformers' default")
    p.add_argument("--adapter", default="none", choices=["none", "lora"])
    p.add_argument("--lora_r", type=int, default=8)
    p.add_argument("--lora_alpha", type=float, default=8)
    p.add_argument("--lora_dropout", type=float, default=0.0)
    p.add_argument("--lora_targets", default="",
                   help="';'-separated module names (as the results file writes them); "
                        "empty: PEFT's default for the family")
    p.add_argument("--weights", default="full", choices=["full", "int8", "nf4", "fp4"],
                   help="int8: from_pretrained with BitsAndBytesConfig(load_in_8bit=True)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: no peaks (the CPU fixtures come from tests/fixtures/), the rest as on CUDA")
    p.add_argument("--sdpa", default="default", choices=["default"] + sorted(SDPA_BACKENDS),
                   help="run the steps under torch.nn.attention.sdpa_kernel(that backend)")
    c = sub.add_parser("compare", help="reference for every ok CUDA row of a results directory")
    c.add_argument("results")
    c.add_argument("--jobs", type=int, default=1, help="points measured at once (peaks only)")
    c.add_argument("--save", help="append each reference point, as JSON lines, to this file")
    c.add_argument("--load", help="read the reference points from a file --save wrote, measure "
                                  "none, and compare emulated rows too")
    n = sub.add_parser("plan", help="the points of a dry run (sweep run CONFIG --dry-run --json), "
                                    "one line each, for `points`")
    n.add_argument("dry_run_json")
    m = sub.add_parser("points", help="measure the points a file lists, one per line")
    m.add_argument("file")
    m.add_argument("--jobs", type=int, default=1)
    m.add_argument("--save", required=True)
    a = ap.parse_args()
    if a.cmd == "point":
        if a.model not in ZOO and not config_file(a.model):
            raise SystemExit(f"unknown model {a.model}")
        if a.audio_s and not math.isclose(a.audio_s, 30) and a.model in ZOO and ZOO[a.model][0].startswith("whisper"):
            raise SystemExit("transformers' Whisper encoder takes only 30 s of audio")
        a.use_cache = a.use_cache == "true"
        a.lora_targets = [t for t in a.lora_targets.split(";") if t]
        print(json.dumps(point(a)))
    elif a.cmd == "plan":
        plan(a.dry_run_json)
    elif a.cmd == "points":
        points(a.file, a.jobs, a.save)
    else:
        compare(a.results, a.jobs, a.save, a.load)


if __name__ == "__main__":
    main()
