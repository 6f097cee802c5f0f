"""HF checkpoint writing (config.json + model.safetensors, written by hand: there is no
safetensors package here) and reading back for the recipes' own eval."""
import json
import os
import struct

import torch

DTYPES = {"f32": ("F32", torch.float32), "bf16": ("BF16", torch.bfloat16)}
ST_READ = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def write_safetensors(path, tensors, dtype="bf16"):
    """tensors: {name: tensor}; written in sorted name order, little-endian, 8-byte aligned header."""
    st_name, tdtype = DTYPES[dtype]
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).to(tdtype).contiguous().cpu()
        raw = (t.view(torch.int16) if tdtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": st_name, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


def read_safetensors(path):
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            if info["dtype"] not in ST_READ:
                raise ValueError(f"{path}: tensor {name}: dtype {info['dtype']} not supported")
            b, e = info["data_offsets"]
            f.seek(base + b)
            raw = bytearray(f.read(e - b))
            if info["dtype"] == "BF16":
                t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16)
            else:
                t = torch.frombuffer(raw, dtype=ST_READ[info["dtype"]])
            out[name] = t.reshape(info["shape"]).to(torch.float32).clone()
    return out


def export(model, out_dir, dtype="bf16", extra_config=None):
    """Write model.config (+ extra) as config.json and the weights as model.safetensors."""
    os.makedirs(out_dir, exist_ok=True)
    cfg = dict(model.config)
    cfg["torch_dtype"] = {"bf16": "bfloat16", "f32": "float32"}[dtype]
    if extra_config:
        cfg.update(extra_config)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    write_safetensors(os.path.join(out_dir, "model.safetensors"), model.state_dict(), dtype)


def load(model_dir):
    """(model, config) from an HF directory written by export()."""
    import models  # train/models.py

    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    model = models.build(cfg)
    W = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    sd = model.state_dict()
    missing = sorted(set(sd) - set(W))
    extra = sorted(set(W) - set(sd))
    if missing or extra:
        raise ValueError(f"{model_dir}/model.safetensors: missing {missing[:5]}, unexpected {extra[:5]}")
    for k in sd:
        if tuple(W[k].shape) != tuple(sd[k].shape):
            raise ValueError(f"{model_dir}/model.safetensors: {k} has shape {list(W[k].shape)}, "
                             f"config.json implies {list(sd[k].shape)}")
    model.load_state_dict(W)
    return model, cfg
