"""The zoo's torch architectures, written in plain `torch.nn` with random weights.

torchvision and transformers cannot be installed beside the CPU build of torch here, so each network is
rewritten after the original's layer structure and sizes (the same layer types, widths, kernel sizes, strides,
activations and attention arithmetic); where depth was cut to keep export and compile times short, the model's
description says so. Every entry of `MODELS` builds its module and its example inputs from a fixed seed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def _conv_bn_act(cin, cout, k, stride=1, groups=1, act: type[nn.Module] | None = nn.ReLU) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


# --- ResNet-18 (torchvision resnet18) ------------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = _conv_bn_act(cin, cout, 3, stride)
        self.conv2 = _conv_bn_act(cout, cout, 3, 1, act=None)
        self.down = _conv_bn_act(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else None

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        return F.relu(self.conv2(self.conv1(x)) + identity)


class ResNet18(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(_conv_bn_act(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# --- MobileNetV2 (torchvision mobilenet_v2) ------------------------------------------------------------------
class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else [_conv_bn_act(cin, hidden, 1, act=nn.ReLU6)]
        layers += [_conv_bn_act(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                   _conv_bn_act(hidden, cout, 1, act=None)]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.conv(x) if self.residual else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        layers, cin = [_conv_bn_act(3, 32, 3, 2, act=nn.ReLU6)], 32
        for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                           (6, 160, 3, 2), (6, 320, 1, 1)):
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(_conv_bn_act(cin, 1280, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


# --- MobileNetV3 small / large (torchvision mobilenet_v3_*) --------------------------------------------------
class SqueezeExcitation(nn.Module):
    """torchvision's SqueezeExcitation: global average pool, 1x1 conv, activation, 1x1 conv, gate."""

    def __init__(self, channels, squeeze, act=nn.ReLU, gate=nn.Sigmoid):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(channels, squeeze, 1), nn.Conv2d(squeeze, channels, 1)
        self.act, self.gate = act(), gate()

    def forward(self, x):
        s = self.gate(self.fc2(self.act(self.fc1(F.adaptive_avg_pool2d(x, 1)))))
        return x * s


class MobileNetV3Block(nn.Module):
    def __init__(self, cin, k, exp, cout, se, act, stride):
        super().__init__()
        layers = [] if exp == cin else [_conv_bn_act(cin, exp, 1, act=act)]
        layers.append(_conv_bn_act(exp, exp, k, stride, groups=exp, act=act))
        if se:
            layers.append(SqueezeExcitation(exp, _make_divisible(exp // 4), gate=nn.Hardsigmoid))
        layers.append(_conv_bn_act(exp, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.block(x) if self.residual else self.block(x)


_V3_LARGE = [(16, 3, 16, 16, False, "RE", 1), (16, 3, 64, 24, False, "RE", 2), (24, 3, 72, 24, False, "RE", 1),
             (24, 5, 72, 40, True, "RE", 2), (40, 5, 120, 40, True, "RE", 1), (40, 5, 120, 40, True, "RE", 1),
             (40, 3, 240, 80, False, "HS", 2), (80, 3, 200, 80, False, "HS", 1), (80, 3, 184, 80, False, "HS", 1),
             (80, 3, 184, 80, False, "HS", 1), (80, 3, 480, 112, True, "HS", 1), (112, 3, 672, 112, True, "HS", 1),
             (112, 5, 672, 160, True, "HS", 2), (160, 5, 960, 160, True, "HS", 1), (160, 5, 960, 160, True, "HS", 1)]
_V3_SMALL = [(16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2), (24, 3, 88, 24, False, "RE", 1),
             (24, 5, 96, 40, True, "HS", 2), (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
             (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1), (48, 5, 288, 96, True, "HS", 2),
             (96, 5, 576, 96, True, "HS", 1), (96, 5, 576, 96, True, "HS", 1)]


class MobileNetV3(nn.Module):
    def __init__(self, config, last_channel, num_classes=1000):
        super().__init__()
        layers = [_conv_bn_act(3, 16, 3, 2, act=nn.Hardswish)]
        for cin, k, exp, cout, se, act, stride in config:
            layers.append(MobileNetV3Block(cin, k, exp, cout, se, nn.ReLU if act == "RE" else nn.Hardswish, stride))
        last_conv = 6 * config[-1][3]
        layers.append(_conv_bn_act(config[-1][3], last_conv, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(last_conv, last_channel), nn.Hardswish(), nn.Dropout(0.2),
                                        nn.Linear(last_channel, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


# --- EfficientNet-B0 (torchvision efficientnet_b0) -----------------------------------------------------------
class MBConv(nn.Module):
    def __init__(self, cin, cout, k, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else [_conv_bn_act(cin, hidden, 1, act=nn.SiLU)]
        layers += [_conv_bn_act(hidden, hidden, k, stride, groups=hidden, act=nn.SiLU),
                   SqueezeExcitation(hidden, max(1, cin // 4), act=nn.SiLU),
                   _conv_bn_act(hidden, cout, 1, act=None)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.block(x) if self.residual else self.block(x)


class EfficientNetB0(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        layers, cin = [_conv_bn_act(3, 32, 3, 2, act=nn.SiLU)], 32
        for expand, k, stride, cout, n in ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                                           (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)):
            for i in range(n):
                layers.append(MBConv(cin, cout, k, stride if i == 0 else 1, expand))
                cin = cout
        layers.append(_conv_bn_act(cin, 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


# --- RegNetY-400MF (torchvision regnet_y_400mf) --------------------------------------------------------------
class RegNetBottleneck(nn.Module):
    """ResBottleneckBlock: 1x1, grouped 3x3 (group width 8), SE (1/4 of the block input width), 1x1."""

    def __init__(self, cin, cout, stride, group_width=8, se_ratio=0.25):
        super().__init__()
        self.a = _conv_bn_act(cin, cout, 1)
        self.b = _conv_bn_act(cout, cout, 3, stride, groups=cout // group_width)
        self.se = SqueezeExcitation(cout, int(round(se_ratio * cin)))
        self.c = _conv_bn_act(cout, cout, 1, act=None)
        self.proj = _conv_bn_act(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else None

    def forward(self, x):
        identity = x if self.proj is None else self.proj(x)
        return F.relu(identity + self.c(self.se(self.b(self.a(x)))))


class RegNetY400MF(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        layers, cin = [_conv_bn_act(3, 32, 3, 2)], 32
        for width, depth in ((48, 1), (104, 3), (208, 6), (440, 6)):
            for i in range(depth):
                layers.append(RegNetBottleneck(cin, width, 2 if i == 0 else 1))
                cin = width
        self.trunk = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.trunk(x), 1), 1))


# --- ConvNeXt-Tiny (torchvision convnext_tiny), depths cut from 3-3-9-3 to 2-2-4-2 ---------------------------
class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor (permute, normalize, permute back), as torchvision's."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pw1, self.pw2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.layer_scale = nn.Parameter(torch.rand(dim, 1, 1) * 0.5 + 0.1)

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pw2(F.gelu(self.pw1(self.norm(y)))).permute(0, 3, 1, 2)
        return x + self.layer_scale * y


class ConvNeXtTiny(nn.Module):
    def __init__(self, depths=(2, 2, 4, 2), dims=(96, 192, 384, 768), num_classes=1000):
        super().__init__()
        layers = [nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6)]
        for i, (depth, dim) in enumerate(zip(depths, dims)):
            if i > 0:
                layers += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], dim, 2, 2)]
            layers += [ConvNeXtBlock(dim) for _ in range(depth)]
        self.features = nn.Sequential(*layers)
        self.norm = LayerNorm2d(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], num_classes)

    def forward(self, x):
        x = self.norm(F.adaptive_avg_pool2d(self.features(x), 1))
        return self.head(torch.flatten(x, 1))


# --- ViT-Tiny/16 at 224 (torchvision VisionTransformer layout, timm's vit_tiny sizes) ------------------------
class ViTEncoderBlock(nn.Module):
    def __init__(self, dim, heads, mlp_dim):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Linear(mlp_dim, dim))

    def forward(self, x):
        y = self.ln_1(x)
        x = x + self.self_attention(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class ViTTiny(nn.Module):
    def __init__(self, image=224, patch=16, dim=192, depth=12, heads=3, mlp_dim=768, num_classes=1000):
        super().__init__()
        self.conv_proj = nn.Conv2d(3, dim, patch, patch)
        self.class_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embedding = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.layers = nn.Sequential(*[ViTEncoderBlock(dim, heads, mlp_dim) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embedding
        return self.head(self.ln(self.layers(x))[:, 0])


# --- U-Net-style segmentation net: ConvTranspose and Resize (bilinear, nearest) up-sampling -------------------
class UNetSeg(nn.Module):
    """Four encoder levels (two Conv-BN-ReLU each, max-pool between); the decoder goes up once with
    ConvTranspose2d(2, stride 2), once with bilinear and once with nearest interpolation, concatenating the skips,
    and ends in 21 class logits resized bilinearly to the input's size."""

    def __init__(self, widths=(32, 64, 128, 256), num_classes=21):
        super().__init__()
        def double(cin, cout):
            return nn.Sequential(_conv_bn_act(cin, cout, 3), _conv_bn_act(cout, cout, 3))
        w = widths
        self.enc = nn.ModuleList([double(3, w[0]), double(w[0], w[1]), double(w[1], w[2]), double(w[2], w[3])])
        self.up3 = nn.ConvTranspose2d(w[3], w[2], 2, 2)
        self.dec3 = double(2 * w[2], w[2])
        self.dec2 = double(w[2] + w[1], w[1])
        self.dec1 = double(w[1] + w[0], w[0])
        self.classes = nn.Conv2d(w[0], num_classes, 1)

    def forward(self, x):
        size = x.shape[-2:]
        s1 = self.enc[0](x)
        s2 = self.enc[1](F.max_pool2d(s1, 2))
        s3 = self.enc[2](F.max_pool2d(s2, 2))
        b = self.enc[3](F.max_pool2d(s3, 2))
        y = self.dec3(torch.cat([self.up3(b), s3], 1))
        y = self.dec2(torch.cat([F.interpolate(y, scale_factor=2.0, mode="bilinear", align_corners=False), s2], 1))
        y = self.dec1(torch.cat([F.interpolate(y, scale_factor=2.0, mode="nearest"), s1], 1))
        y = self.classes(F.max_pool2d(y, 2))
        return F.interpolate(y, size=size, mode="bilinear", align_corners=False)


# --- 1-D audio conv net: wav2vec 2.0's feature encoder over one second at 16 kHz -----------------------------
class Wav2VecFeatureEncoder(nn.Module):
    """Seven Conv1d layers (512 channels; kernels 10,3,3,3,3,2,2; strides 5,2,2,2,2,2,2), GroupNorm after the
    first, GELU after each, then a LayerNorm + Linear feature projection to 768 (wav2vec2-base)."""

    def __init__(self, channels=512, out_dim=768):
        super().__init__()
        spec = [(10, 5)] + [(3, 2)] * 4 + [(2, 2)] * 2
        self.convs = nn.ModuleList()
        cin = 1
        for k, s in spec:
            self.convs.append(nn.Conv1d(cin, channels, k, s, bias=False))
            cin = channels
        self.group_norm = nn.GroupNorm(channels, channels)
        self.layer_norm = nn.LayerNorm(channels)
        self.projection = nn.Linear(channels, out_dim)

    def forward(self, x):
        x = x[:, None]
        for i, conv in enumerate(self.convs):
            x = conv(x)
            x = F.gelu(self.group_norm(x) if i == 0 else x)
        return self.projection(self.layer_norm(x.transpose(1, 2)))


# --- BERT / MiniLM-size encoder ------------------------------------------------------------------------------
class BertLayer(nn.Module):
    """HuggingFace BertLayer in eager attention: separate Q/K/V Linear, scores / sqrt(d) + additive mask,
    softmax, context, output Linear + residual + LayerNorm, GELU (erf) MLP + residual + LayerNorm."""

    def __init__(self, hidden, heads, intermediate):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.attn_out, self.attn_norm = nn.Linear(hidden, hidden), nn.LayerNorm(hidden, eps=1e-12)
        self.inter, self.out = nn.Linear(hidden, intermediate), nn.Linear(intermediate, hidden)
        self.out_norm = nn.LayerNorm(hidden, eps=1e-12)

    def _split(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x, additive_mask):
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + additive_mask
        ctx = torch.matmul(scores.softmax(-1), v).permute(0, 2, 1, 3).flatten(2)
        x = self.attn_norm(x + self.attn_out(ctx))
        return self.out_norm(x + self.out(F.gelu(self.inter(x))))


class BertEncoder(nn.Module):
    """MiniLM-L6-H384 sizes: 6 layers, hidden 384, 12 heads, intermediate 1536, vocab 30522, pooler on [CLS]."""

    def __init__(self, layers=6, hidden=384, heads=12, intermediate=1536, vocab=30522, positions=512):
        super().__init__()
        self.word, self.position, self.token_type = (nn.Embedding(vocab, hidden), nn.Embedding(positions, hidden),
                                                     nn.Embedding(2, hidden))
        self.emb_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList([BertLayer(hidden, heads, intermediate) for _ in range(layers)])
        self.pooler = nn.Linear(hidden, hidden)

    def forward(self, input_ids, attention_mask, token_type_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        x = self.emb_norm(self.word(input_ids) + self.position(positions) + self.token_type(token_type_ids))
        additive = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, additive)
        return x, torch.tanh(self.pooler(x[:, 0]))


# --- GPT-2-size decoder, without and with past key/values ----------------------------------------------------
class GPT2Block(nn.Module):
    """HuggingFace GPT2Block (eager): LayerNorm, fused c_attn Linear split into Q/K/V, causal mask by where(...,
    finfo.min), softmax, c_proj; LayerNorm, MLP with gelu_new (the tanh approximation)."""

    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.ln_1, self.ln_2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.c_attn, self.c_proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.c_fc, self.mlp_proj = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def _split(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x, past_key=None, past_value=None):
        q, k, v = self.c_attn(self.ln_1(x)).split(x.shape[-1], dim=2)
        q, k, v = self._split(q), self._split(k), self._split(v)
        if past_key is not None:
            k, v = torch.cat([past_key, k], dim=-2), torch.cat([past_value, v], dim=-2)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        s_q, s_k = q.shape[-2], k.shape[-2]
        causal = torch.ones(s_k, s_k, dtype=torch.bool, device=x.device).tril()[s_k - s_q:s_k]
        scores = torch.where(causal, scores, torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype))
        ctx = torch.matmul(scores.softmax(-1), v).permute(0, 2, 1, 3).flatten(2)
        x = x + self.c_proj(ctx)
        h = self.c_fc(self.ln_2(x))
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return x + self.mlp_proj(h), k, v


class GPT2(nn.Module):
    """GPT-2 (124M) widths with 4 of its 12 layers: hidden 768, 12 heads, vocab 50257, tied LM head.
    forward(input_ids, *past) takes one key and one value per layer ([batch, 12, past, 64]) when given and
    returns (logits, *presents) then; without past it returns the logits alone."""

    def __init__(self, layers=4, hidden=768, heads=12, vocab=50257, positions=1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(positions, hidden)
        self.blocks = nn.ModuleList([GPT2Block(hidden, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, input_ids, *past):
        past_len = past[0].shape[-2] if past else 0
        positions = torch.arange(past_len, past_len + input_ids.shape[1], device=input_ids.device)[None]
        x = self.wte(input_ids) + self.wpe(positions)
        presents = []
        for i, block in enumerate(self.blocks):
            x, k, v = block(x, *(past[2 * i:2 * i + 2] if past else ()))
            presents += [k, v]
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return (logits, *presents) if past else logits


# --- the registry --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ZooModel:
    """A zoo entry: `build()` gives the module (random weights, eval mode), `inputs()` the example inputs in
    forward's order, `input_names`/`output_names` name them in the TorchScript export."""

    name: str
    description: str
    module: Callable[[], nn.Module]
    inputs: Callable[[torch.Generator], tuple[torch.Tensor, ...]]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]

    def build(self, seed: int = 0) -> nn.Module:
        torch.manual_seed(seed)
        m = self.module().eval()
        with torch.no_grad():  # BatchNorm statistics that are not the identity, so folding them is exercised
            for bn in (x for x in m.modules() if isinstance(x, (nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm))):
                if bn.weight is not None:
                    bn.weight.uniform_(0.5, 1.5)
                    bn.bias.uniform_(-0.2, 0.2)
                if isinstance(bn, nn.BatchNorm2d):
                    bn.running_mean.uniform_(-0.2, 0.2)
                    bn.running_var.uniform_(0.5, 1.5)
        return m

    def example_inputs(self, seed: int = 0) -> tuple[torch.Tensor, ...]:
        return self.inputs(torch.Generator().manual_seed(seed))


def _image(g, size=224):
    return (torch.randn(1, 3, size, size, generator=g),)


def _text(g, seq=128, vocab=30522, pad=16):
    ids = torch.randint(0, vocab, (1, seq), generator=g)
    mask = torch.ones(1, seq, dtype=torch.int64)
    mask[:, seq - pad:] = 0
    token_types = torch.zeros(1, seq, dtype=torch.int64)
    token_types[:, seq // 2:] = 1
    return ids, mask, token_types


_GPT2_LAYERS, _PAST = 4, 127


def _gpt2_past(g):
    ids = torch.randint(0, 50257, (1, 1), generator=g)
    past = tuple(torch.randn(1, 12, _PAST, 64, generator=g) for _ in range(2 * _GPT2_LAYERS))
    return (ids, *past)


_PAST_NAMES = tuple(f"past_{kv}_{i}" for i in range(_GPT2_LAYERS) for kv in ("key", "value"))
_PRESENT_NAMES = tuple(f"present_{kv}_{i}" for i in range(_GPT2_LAYERS) for kv in ("key", "value"))

MODELS: dict[str, ZooModel] = {m.name: m for m in [
    ZooModel("resnet18", "ResNet-18, 1x3x224x224", ResNet18, _image, ("image",), ("logits",)),
    ZooModel("mobilenet_v2", "MobileNetV2 (ReLU6, depthwise), 1x3x224x224", MobileNetV2, _image, ("image",),
             ("logits",)),
    ZooModel("mobilenet_v3_small", "MobileNetV3-Small (HardSwish, SE with HardSigmoid), 1x3x224x224",
             lambda: MobileNetV3(_V3_SMALL, 1024), _image, ("image",), ("logits",)),
    ZooModel("mobilenet_v3_large", "MobileNetV3-Large (HardSwish, SE with HardSigmoid), 1x3x224x224",
             lambda: MobileNetV3(_V3_LARGE, 1280), _image, ("image",), ("logits",)),
    ZooModel("efficientnet_b0", "EfficientNet-B0 (SiLU, SE, depthwise 3x3/5x5), 1x3x224x224", EfficientNetB0,
             _image, ("image",), ("logits",)),
    ZooModel("regnet_y_400mf", "RegNetY-400MF (grouped 3x3, group width 8, SE), 1x3x224x224", RegNetY400MF,
             _image, ("image",), ("logits",)),
    ZooModel("convnext_tiny", "ConvNeXt-Tiny widths, depths 2-2-4-2 (of 3-3-9-3): depthwise 7x7, LayerNorm, "
             "GELU, 1x3x224x224", ConvNeXtTiny, _image, ("image",), ("logits",)),
    ZooModel("vit_tiny", "ViT-Tiny/16 (12 layers, dim 192, 3 heads, nn.MultiheadAttention), 1x3x224x224",
             ViTTiny, _image, ("image",), ("logits",)),
    ZooModel("unet_seg", "U-Net-style segmentation (ConvTranspose, bilinear and nearest Resize), 1x3x256x256",
             UNetSeg, lambda g: _image(g, 256), ("image",), ("masks",)),
    ZooModel("wav2vec_conv", "wav2vec2 feature encoder (7 Conv1d x 512, GroupNorm, GELU), 1x16000 samples",
             Wav2VecFeatureEncoder, lambda g: (torch.randn(1, 16000, generator=g),), ("audio",), ("features",)),
    ZooModel("bert_minilm", "BERT encoder, MiniLM-L6-H384 sizes (6 layers, 12 heads), 1x128 tokens, 16 masked",
             BertEncoder, _text, ("input_ids", "attention_mask", "token_type_ids"), ("last_hidden", "pooled")),
    ZooModel("gpt2", "GPT-2 widths, 4 of 12 layers (hidden 768, vocab 50257), 1x128 tokens, no past",
             GPT2, lambda g: (torch.randint(0, 50257, (1, 128), generator=g),), ("input_ids",), ("logits",)),
    ZooModel("gpt2_past", f"the same GPT-2, one decode step: 1 token over past key/values of {_PAST}, presents out",
             GPT2, _gpt2_past, ("input_ids", *_PAST_NAMES), ("logits", *_PRESENT_NAMES)),
]}
