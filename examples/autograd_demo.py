"""A two-minute tour of minitensor: a gradient by hand vs by backward, a gradcheck, and
a small MLP learning XOR-like data with Adam.

    python examples/autograd_demo.py
"""
import numpy as np

import minitensor as mt
import minitensor.functional as F
from minitensor import nn, optim


def main() -> None:
    # 1. d/dx of sum(tanh(x) * x) by backward, against the formula tanh(x) + x(1 - tanh²x)
    x = mt.tensor(np.linspace(-2, 2, 5), requires_grad=True)
    (x.tanh() * x).sum().backward()
    expected = np.tanh(x.numpy()) + x.numpy() * (1 - np.tanh(x.numpy()) ** 2)
    print("backward :", np.round(x.grad.numpy(), 4))
    print("by hand  :", np.round(expected, 4))

    # 2. gradcheck: backward against central differences, random cotangent, every entry
    a = mt.tensor(np.random.default_rng(0).standard_normal((3, 5)), requires_grad=True)
    print("gradcheck(softmax):", mt.gradcheck(lambda t: F.softmax(t, axis=-1), [a]))

    # 3. a small MLP learns XOR of the signs of two inputs
    mt.manual_seed(0)
    rng = np.random.default_rng(0)
    pts = rng.uniform(-1, 1, (256, 2)).astype(np.float32)
    labels = ((pts[:, 0] > 0) ^ (pts[:, 1] > 0)).astype(np.int64)
    model = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 2))
    opt = optim.Adam(model.parameters(), lr=0.02)
    xs, ys = mt.tensor(pts), mt.tensor(labels)
    for step in range(301):
        loss = F.cross_entropy(model(xs), ys)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            acc = (model(xs).numpy().argmax(-1) == labels).mean()
            print(f"step {step:3d}  loss {loss.item():.4f}  accuracy {acc:.1%}")


if __name__ == "__main__":
    main()
