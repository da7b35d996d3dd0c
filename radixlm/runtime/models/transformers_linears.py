"""Route a transformers model's ``nn.Linear`` products through our ``Linear`` layer.

The module classes stay transformers'; only each plain ``torch.nn.Linear`` is replaced by our
``Linear`` over the same parameters (a tied LM head keeps sharing the embedding's). Its products then
take our dispatch (``kernels/linear.py``): the small-batch CPU kernel at decode sizes, and the
oneDNN-packed product once ``pack_model_weights`` has packed them. Same values up to rounding.
"""

from __future__ import annotations

from torch import nn

from radixlm.runtime.layers.linear import Linear


def use_our_linears(model: nn.Module) -> int:
    """Replace every plain ``nn.Linear`` inside ``model`` by a ``Linear`` sharing its parameters;
    returns how many were replaced."""
    swaps = [
        (parent, child_name, child)
        for parent in model.modules()
        for child_name, child in parent.named_children()
        if type(child) is nn.Linear
    ]
    for parent, child_name, child in swaps:
        ours = Linear(0, 0)  # no storage of its own: it takes the child's parameters
        ours.weight = child.weight
        ours.bias = child.bias
        setattr(parent, child_name, ours)
    return len(swaps)
