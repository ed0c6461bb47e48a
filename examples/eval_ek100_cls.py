"""Multi-view testing with tubelet's loader: every action's temporal views x spatial crops
(AVION's and VideoMAE's testing), the model's softmax averaged per action by the batches'
item, view and crop keys, then top-1 and top-5, as `tubelet eval` scores its own models.

    PYTHONPATH=build/python /usr/bin/python3 examples/train_ek100_cls.py --data data/chunks \\
        --train data/synth/annotations/EPIC_100_train.csv --steps 50 --save tiny.pt
    PYTHONPATH=build/python /usr/bin/python3 examples/eval_ek100_cls.py --data data/chunks \\
        --val data/synth/annotations/EPIC_100_validation.csv --weights tiny.pt --views 2 --crops 3

It prints one JSON line per action ({"item", "label", "top1", "probs"}) and one with the
scores ({"items", "clips", "top1", "top5"}).
"""
import argparse
import json

import torch

import tubelet.torch
from train_ek100_cls import MEAN_OPENAI, STD_OPENAI, Normalize, TinyVideoNet


def load_model(path, device):
    """train_ek100_cls.py --save's weights as one module, normalisation included, and their
    settings (classes, label, frames, size, width)."""
    saved = torch.load(path, map_location="cpu")
    net = TinyVideoNet(saved["classes"], saved["width"])
    net.load_state_dict(saved["model"])
    model = torch.nn.Sequential(Normalize(MEAN_OPENAI, STD_OPENAI), net)
    return model.to(device).eval(), saved


def average_views(loader, model, views, crops, n_classes):
    """Each item's softmax averaged over its views x crops, (n_items, K), and its labels
    (n_items, 3): verb, noun, action."""
    n_items = loader.dataset_size // (views * crops)
    probs = torch.zeros(n_items, n_classes)
    labels = torch.full((n_items, 3), -1, dtype=torch.int32)
    seen = torch.zeros(n_items, views, crops, dtype=torch.int32)
    with torch.no_grad():
        for b in loader:
            item = b["item"].cpu()
            probs.index_add_(0, item, model(b["video"]).softmax(-1).float().cpu())
            labels[item] = b["label"].cpu()
            seen.index_put_((item, b["view"].cpu(), b["crop"].cpu()),
                            torch.ones_like(item, dtype=torch.int32), accumulate=True)
    assert (seen == 1).all(), "every item's views x crops, each once"
    return probs / (views * crops), labels


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", "--root", dest="root", required=True,
                    help="prepared videos (tubelet prep --out), as tubelet train --data")
    ap.add_argument("--val", required=True, help="EPIC_100_validation.csv")
    ap.add_argument("--weights", required=True, help="train_ek100_cls.py --save's file")
    ap.add_argument("--views", type=int, default=2, help="temporal views per action")
    ap.add_argument("--crops", type=int, default=3, choices=[1, 3], help="spatial crops")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()

    device = torch.device(args.device)
    model, saved = load_model(args.weights, device)
    # Evaluation clips: every action's views x crops in order, centre crops, no flips.
    loader = tubelet.torch.Loader(args.root, args.val, format="epic", frames=saved["frames"],
                                  size=saved["size"], train=False, views=args.views,
                                  crops=args.crops, batch=args.batch, workers=args.workers,
                                  device=device)
    with loader:
        probs, labels = average_views(loader, model, args.views, args.crops, saved["classes"])
        clips = loader.stats()["clips"]
    y = labels[:, {"verb": 0, "noun": 1, "action": 2}[saved["label"]]].long()
    top5 = probs.topk(min(5, probs.shape[1]), dim=1).indices
    for i in range(len(probs)):
        print(json.dumps({"item": i, "label": int(y[i]), "top1": int(top5[i, 0]),
                          "probs": probs[i].tolist()}))
    print(json.dumps({"items": len(probs), "clips": clips,
                      "top1": round(float((top5[:, 0] == y).float().mean()), 4),
                      "top5": round(float((top5 == y[:, None]).any(1).float().mean()), 4)}))


if __name__ == "__main__":
    main()
