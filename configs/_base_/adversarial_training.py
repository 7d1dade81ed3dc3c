# Adversarial training, PGD-AT as PIR-AT's training script runs it (Croce et
# al., ECCV 2024): every image of every batch is replaced by PGD's, L-inf
# eps 4 levels (4/255), 2 steps of 2.55 levels, no random start, the model
# in eval mode for the attack (AdversarialTrainingHook always attacks so).
# From an ImageNet-robust backbone checkpoint this is PIR-AT; from a plain
# or random one, PGD-AT. Cost per iteration: 2 more forward and backward
# passes (to the input only) and one forward (the logged pixel accuracy);
# PIR-AT's 5-step variant: steps=5. docs/evidence.md, "Adversarial training".
# Against SEA's APGD instead: name='apgd-mce' or 'apgd-js', steps >= 4 (its
# iterations); APGD sets its own step and start (step_size, random_start
# do not apply); apgd-mce-bal needs attack.class_weights.
#
# Inherit it last: _base_ = [..., '../_base_/adversarial_training.py'] (the
# config needs custom_imports=dict(imports=['mmseg_elliptical'])). A config
# whose bases already set custom_hooks adds the hook to its own list instead.
adversarial_attack = dict(
    name='pgd',
    norm='linf',
    eps=4,
    steps=2,
    step_size=2.55,
    random_start=False)
custom_hooks = [
    dict(type='AdversarialTrainingHook', attack=adversarial_attack, ratio=1.)
]
