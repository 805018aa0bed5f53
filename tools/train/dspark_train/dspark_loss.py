"""One DSpark training forward: anchors, blocks, masks, and the DeepSpec loss.

Loss = 0.1 CE + 0.9 L1 + 1.0 BCE(confidence), each a weighted mean with weights
W[k] = eval_mask[k] * exp(-k / gamma) over block slots k (dspark-training.md section 3):
  CE   cross-entropy of the Markov-biased draft logits to the data token x_{p+k+1};
  L1   full L1 distance sum_v |p_draft - p_target| (in [0, 2], not halved) to the target's
       temperature-1 distribution at the same position;
  BCE  confidence logit vs the detached analytic acceptance beta = clamp(1 - L1/2, 0, 1).
"""
import math

import torch
import torch.nn.functional as F


def sample_anchors(loss_mask, n_anchors, gen):
    """Anchors [b, N] (sorted) and keep [b, N]: positions p <= T-2 with loss_mask[p] and loss_mask[p+1],
    uniformly without replacement; missing ones are dummies (p = 0, keep = False)."""
    b, T = loss_mask.shape
    cand = torch.zeros_like(loss_mask)
    cand[:, :-1] = loss_mask[:, :-1] & loss_mask[:, 1:]
    # Drawn from the host generator whatever the device: a run picks the same anchors on CPU and GPU.
    keys = torch.rand(b, T, generator=gen).to(loss_mask.device).masked_fill(~cand, 2.0)
    order = keys.argsort(dim=1)[:, :n_anchors]
    keep = torch.gather(cand, 1, order)
    anchors = torch.where(keep, order, torch.zeros_like(order))
    anchors, idx = torch.sort(torch.where(keep, anchors, torch.full_like(anchors, T)), dim=1)
    keep = torch.gather(keep, 1, idx)
    return torch.where(keep, anchors, torch.zeros_like(anchors)), keep


def block_mask(anchors, keep, T, B):
    """[b, N*B, T + N*B] bool: a block's queries see context t < p and every slot of their own block."""
    b, N = anchors.shape
    dev = anchors.device
    p = anchors.repeat_interleave(B, dim=1)                                # [b, Q]
    ctx = torch.arange(T, device=dev)[None, None, :] < p[:, :, None]                    # strict: not the anchor's own state
    ctx = ctx & keep.repeat_interleave(B, dim=1)[:, :, None]
    blk_id = torch.arange(N * B, device=dev) // B
    own = (blk_id[:, None] == blk_id[None, :]).expand(b, -1, -1)            # dummies see only themselves: no NaN
    return torch.cat([ctx, own], dim=2)


def dspark_forward(drafter, target, x, loss_mask, n_anchors, gen, gamma=4.0,
                   alpha_ce=0.1, alpha_l1=0.9, alpha_conf=1.0):
    """x [b, T] token ids, loss_mask [b, T] bool. Returns (loss, metrics dict)."""
    c = drafter.c
    B = c.block_size
    b, T = x.shape
    dev = x.device
    embd = target.tok_embd.weight
    with torch.no_grad():
        last, tapped = target.hidden_states(x, taps=tuple(c.target_layer_ids))
        taps = torch.cat([tapped[l] for l in c.target_layer_ids], dim=-1)
    anchors, keep = sample_anchors(loss_mask, n_anchors, gen)
    N = anchors.shape[1]
    k = torch.arange(B, device=dev)
    pos = anchors[:, :, None] + k                                           # [b, N, B] slot positions
    posc = pos.clamp(max=T - 1)
    bid = torch.full((b, N, B), c.mask_token_id, dtype=torch.long, device=dev)
    bid[:, :, 0] = torch.gather(x, 1, anchors)
    wdt = drafter.fc.weight.dtype
    emb = F.embedding(bid.view(b, -1), embd).to(wdt)
    g = drafter.context(taps.to(wdt))
    mask = block_mask(anchors, keep, T, B)
    h = drafter.backbone(emb, pos.view(b, -1), g, torch.arange(T, device=dev), mask).view(b, N, B, -1)

    lab_pos = pos + 1
    valid = (lab_pos < T) & keep[:, :, None]
    lab_posc = lab_pos.clamp(max=T - 1)
    labels = torch.gather(x, 1, lab_posc.view(b, -1)).view(b, N, B)
    valid &= torch.gather(loss_mask, 1, lab_posc.view(b, -1)).view(b, N, B)
    valid = valid.long().cumprod(dim=2).bool()                              # contiguous prefix only
    prev = torch.gather(x, 1, posc.view(b, -1)).view(b, N, B)               # teacher forcing: x_{p+k}

    with torch.no_grad():
        t_h = torch.gather(last, 1, posc.view(b, -1, 1).expand(-1, -1, last.shape[-1]))
        t_logp = F.log_softmax(target.logits_from_hidden(t_h).float(), -1).view(b, N, B, -1)
    bias, e = drafter.markov(prev)
    z = (F.linear(h, embd.to(h.dtype)) + bias).float()
    d_logp = F.log_softmax(z, -1)
    l1 = (d_logp.exp() - t_logp.exp()).abs().sum(-1)                       # [b, N, B]
    beta = (1 - 0.5 * l1).clamp(0, 1).detach()
    ce = -torch.gather(d_logp, -1, labels[..., None]).squeeze(-1)
    conf = drafter.confidence_logit(h, e).float()
    bce = F.binary_cross_entropy_with_logits(conf, beta, reduction="none")
    W = valid.float() * torch.exp(-k.float() / gamma)
    den = W.sum() + 1e-6
    loss = alpha_ce * (W * ce).sum() / den + alpha_l1 * (W * l1).sum() / den + alpha_conf * (W * bce).sum() / den

    with torch.no_grad():
        vm = valid.float()
        nv = vm.sum((0, 1)).clamp(min=1)
        acc_k = (beta * vm).sum((0, 1)) / nv                                # accept_rate@k
        kept = keep.float().sum().clamp(min=1)
        tau = ((torch.cumprod(beta * vm, dim=2).sum(-1) + 1) * keep).sum() / kept
        conf_err = ((torch.sigmoid(conf) - beta).abs() * vm).sum() / vm.sum().clamp(min=1)
        greedy_hit = ((z.argmax(-1) == t_logp.argmax(-1)).float() * vm).sum((0, 1)) / nv
    metrics = {"ce": ((W * ce).sum() / den).item(), "l1": ((W * l1).sum() / den).item(),
               "bce": ((W * bce).sum() / den).item(), "tau_prob": tau.item(), "conf_abs_err": conf_err.item(),
               "accept_at_k": [round(v, 3) for v in acc_k.tolist()],
               "greedy_match_at_k": [round(v, 3) for v in greedy_hit.tolist()]}
    return loss, metrics
