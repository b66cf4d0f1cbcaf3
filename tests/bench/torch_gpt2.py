"""A standard PyTorch GPT-2 for the benchmarks (bench_vs_pytorch.py on the host, bench_gpu.py on a
GPU): nn.Linear, nn.LayerNorm, tanh GELU, tied LM head, causal attention materialised as ours is
(attention="naive") or PyTorch's fused scaled_dot_product_attention (attention="sdpa"), and
torch.optim.AdamW with weight decay on the tensors of rank >= 2 only (as ours).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, nh, attention="naive"):
        super().__init__()
        self.nh, self.attention = nh, attention
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.nh, C // self.nh).transpose(1, 2) for t in (q, k, v))
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.nh)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            y = att.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, L=12, nh=12, C=768, V=50257, maxT=1024, attention="naive"):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList(Block(C, nh, attention) for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def adamw(model, lr=1e-4, weight_decay=0.1):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": other, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95), eps=1e-8)


def train_step(model, opt, idx, autocast=None):
    """One step as ours: zero grads, forward + backward, clip to 1.0, AdamW. autocast: a 16-bit dtype
    for the forward's matrix products (torch.autocast: fp32 weights and optimizer, as ours)."""
    opt.zero_grad(set_to_none=True)
    if autocast is None:
        loss = model(idx, idx)
    else:
        with torch.autocast(device_type=idx.device.type, dtype=autocast):
            loss = model(idx, idx)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
