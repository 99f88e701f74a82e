"""Benchmark a Qwen-Image-sized DiT (random weights, bf16) on one GPU with Spotlight's own code.

Times, with CUDA events (median after warm-up): the raw transformer forward by batch and size,
the Flow-GRPO sampler (spotlight.flow.sampler.sample) end to end, and the GRPO update
(spotlight.flow.update.grpo_update) with LoRA and gradient checkpointing. Reports achieved TFLOP/s
from an explicit FLOP count and compares with shared/calib/h200-qwen-image.json.

    python benchmarks/gpu_qwen_size.py --out OUT_DIR [--layers 60]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from spotlight.config import GRPOConfig, SamplerConfig
from spotlight.flow.grpo import group_advantages
from spotlight.flow.sampler import sample
from spotlight.flow.update import grpo_update
from spotlight.policies.base import TextCond, qwen_transformer_velocity

TXT_TOKENS = 128  # as in the calibration file
DEVICE = "cuda"


def forward_flops(layers: int, dim: int, img_tokens: int, txt_tokens: int = TXT_TOKENS) -> float:
    """FLOPs of one sample's forward.

    Per block and token: q, k, v, out (4 D^2) + MLP D -> 4D -> D (8 D^2) in the token's stream,
    2 FLOPs per multiply-add; attention QK^T and AV over all N tokens: 4 N^2 D. The adaLN
    modulation Linear(D, 6D) of each stream acts once per sample, not per token.
    """
    n = img_tokens + txt_tokens
    per_block = 2 * 12 * dim * dim * n + 4 * n * n * dim + 2 * 2 * 6 * dim * dim
    return layers * per_block


class RandomTextQwenPolicy:
    """The Policy protocol over a bare QwenImageTransformer2DModel with random text embeddings.

    Latents (16, H/8, W/8) as Qwen-Image's VAE gives them, packed 2x2 like the pipeline.
    """

    name = "qwen-size-bench"

    def __init__(self, transformer, height: int, width: int):
        self.transformer = transformer
        self.latent_shape = (16, height // 8, width // 8)
        g = torch.Generator(device="cpu").manual_seed(0)
        joint_dim = transformer.config.joint_attention_dim
        self._embeds = torch.randn(1, TXT_TOKENS, joint_dim, generator=g).to(DEVICE, torch.bfloat16)

    @property
    def device(self) -> torch.device:
        return torch.device(DEVICE)

    def encode_prompts(self, prompts: list[str]) -> TextCond:
        n = len(prompts)
        return TextCond(
            self._embeds.expand(n, -1, -1),
            torch.ones(n, TXT_TOKENS, dtype=torch.bool, device=DEVICE),
        )

    def null_cond(self, batch_size: int) -> TextCond:
        return self.encode_prompts([""] * batch_size)

    def velocity(self, latents, t, cond):
        return qwen_transformer_velocity(self.transformer, latents, t, cond, 2, self.name)

    def decode(self, latents):
        return latents

    def trainable_parameters(self):
        return [p for p in self.transformer.parameters() if p.requires_grad]


def cuda_time(fn, warmup: int = 2, repeats: int = 5) -> dict[str, float]:
    """Median/min/max seconds of ``fn`` with CUDA events (host clock on a CPU dry run)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if DEVICE == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return {"s": statistics.median(times), "lo": min(times), "hi": max(times)}


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def matmul_ceiling() -> float:
    a, b = (torch.randn(8192, 8192, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    r = cuda_time(lambda: a @ b, warmup=3, repeats=10)
    return 2 * 8192**3 / r["s"] / 1e12


def build_transformer(layers: int, tiny: bool):
    from diffusers import QwenImageTransformer2DModel

    t0 = time.perf_counter()
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    shape = (
        dict(
            num_attention_heads=2,
            attention_head_dim=32,
            joint_attention_dim=64,
            axes_dims_rope=(8, 12, 12),
        )
        if tiny
        else {}
    )
    with torch.device(DEVICE):
        model = QwenImageTransformer2DModel(num_layers=layers, **shape)
    torch.set_default_dtype(torch.float32)
    model.requires_grad_(False).eval()
    sync()
    params = sum(p.numel() for p in model.parameters())
    print(f"built {params / 1e9:.2f} B-parameter transformer in {time.perf_counter() - t0:.1f} s")
    return model, params


def bench_forward(model, layers, rows, sizes):
    dim = model.inner_dim
    for size, batches in sizes:
        pol = RandomTextQwenPolicy(model, size, size)
        tokens = (size // 16) ** 2
        for b in batches:
            x = torch.randn(b, *pol.latent_shape, device=DEVICE)
            t = torch.rand(b, device=DEVICE)
            cond = pol.encode_prompts([""] * b)
            with torch.no_grad():
                r = cuda_time(lambda x=x, t=t, cond=cond, pol=pol: pol.velocity(x, t, cond))
            tf = b * forward_flops(layers, dim, tokens) / r["s"] / 1e12
            rows.append({"kind": "fwd", "B": b, "img_tokens": tokens, **r, "tflops": tf})
            print(f"fwd  {size}px B={b:>2}: {r['s']:.3f} s  {tf:6.1f} TFLOP/s", flush=True)


def bench_sampler(model, rows, size, batch=8, steps=4):
    pol = RandomTextQwenPolicy(model, size, size)
    cfg = SamplerConfig(num_steps=steps, eta=0.7, shift=3.0, batch_size=batch)
    prompts = [f"p{i}" for i in range(batch)]
    sample(pol, prompts, list(range(batch)), cfg)  # warm-up
    sync()
    t0 = time.perf_counter()
    trajs = sample(pol, prompts, list(range(batch)), cfg)
    sync()
    dt = time.perf_counter() - t0
    again = sample(pol, prompts, list(range(batch)), cfg)
    identical = all(torch.equal(a.latents, b.latents) for a, b in zip(trajs, again, strict=True))
    rows.append(
        {
            "kind": "sampler",
            "B": batch,
            "num_steps": steps,
            "s": dt,
            "images_per_s": batch / dt,
            "s_per_step": dt / steps,
            "bit_identical_repeat": identical,
        }
    )
    print(
        f"sampler {size}px B={batch} {steps} steps: {dt:.2f} s ({dt / steps:.3f} s/step, "
        f"{batch / dt * steps / 10:.2f} images/s at 10 steps); repeat identical: {identical}"
    )
    return trajs


def bench_update(model, rows, trajs, size, train_batch=4):
    from peft import LoraConfig

    model.add_adapter(
        LoraConfig(
            r=32,
            lora_alpha=32,
            init_lora_weights="gaussian",
            target_modules=["to_q", "to_k", "to_v", "to_out.0"],
        )
    )
    model.enable_gradient_checkpointing()
    model.train()
    pol = RandomTextQwenPolicy(model, size, size)
    lora = pol.trainable_parameters()
    opt = torch.optim.AdamW(lora, lr=1e-5)
    adv = group_advantages(torch.randn(2, len(trajs) // 2))
    cfg = GRPOConfig(
        group_size=len(trajs) // 2, train_batch_size=train_batch, timestep_fraction=0.5
    )
    before = [p.detach().clone() for p in lora]
    if DEVICE == "cuda":
        torch.cuda.reset_peak_memory_stats()
    r = cuda_time(lambda: grpo_update(pol, opt, trajs, adv, cfg, seed=0), warmup=1, repeats=3)
    n_steps = max(1, round(0.5 * trajs[0].sampler.num_steps))
    peak = torch.cuda.max_memory_allocated() / 2**30 if DEVICE == "cuda" else 0.0
    per_fb = r["s"] / (len(trajs) / train_batch * n_steps)
    moved = sum(int(not torch.equal(a, p.detach())) for a, p in zip(before, lora, strict=True))
    assert moved > 0, "the update changed no LoRA parameter"
    rows.append(
        {
            "kind": "grpo_update_lora_ckpt",
            "samples": len(trajs),
            "train_steps": n_steps,
            "train_batch": train_batch,
            **r,
            "s_per_fwd_bwd_chunk": per_fb,
            "peak_GiB": peak,
            "lora_params": sum(p.numel() for p in lora),
            "lora_tensors_changed": moved,
            "lora_tensors": len(lora),
        }
    )
    print(
        f"GRPO update (LoRA r=32, ckpt): {r['s']:.2f} s for {len(trajs)} samples x {n_steps} "
        f"steps = {per_fb:.3f} s per fwd+bwd of B={train_batch}; peak {peak:.1f} GiB; "
        f"{moved}/{len(lora)} LoRA tensors changed"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=60)
    ap.add_argument("--calib", default="docs/calib/h200-qwen-image.json")
    ap.add_argument(
        "--cpu-dry-run",
        action="store_true",
        help="check the script on a CPU with a narrow 1-layer model",
    )
    args = ap.parse_args()
    global DEVICE
    DEVICE = "cpu" if args.cpu_dry_run else "cuda"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (dry run)"
    ceiling = matmul_ceiling() if DEVICE == "cuda" else float("nan")
    print(f"{name}: bf16 8192^3 matmul {ceiling:.0f} TFLOP/s")
    layers = 1 if args.cpu_dry_run else args.layers
    model, params = build_transformer(layers, tiny=args.cpu_dry_run)
    rows: list[dict] = []
    sizes = [(128, [1, 2])] if args.cpu_dry_run else [(512, [1, 4, 8, 16]), (1280, [1])]
    bench_forward(model, layers, rows, sizes)
    size = sizes[0][0]
    trajs = bench_sampler(model, rows, size=size)
    bench_update(model, rows, trajs, size=size)
    result = {
        "device": name,
        "torch": torch.__version__,
        "matmul_bf16_tflops": ceiling,
        "params_B": params / 1e9,
        "layers": layers,
        "rows": rows,
    }
    (out / "gpu_qwen_size.json").write_text(json.dumps(result, indent=1) + "\n")
    calib_path = Path(args.calib)
    if calib_path.exists():
        calib = json.loads(calib_path.read_text())
        print("\ncomparison with the calibration file (same kind, B, tokens):")
        for row in rows:
            for c in calib["rows"]:
                if (
                    c["kind"] == row["kind"]
                    and c["B"] == row["B"]
                    and c["img_tokens"] == row.get("img_tokens")
                ):
                    print(
                        f"  {row['kind']} B={row['B']} tokens={c['img_tokens']}: ours "
                        f"{row['s']:.3f} s, calib {c['s']:.3f} s (ratio {row['s'] / c['s']:.2f})"
                    )


if __name__ == "__main__":
    main()
