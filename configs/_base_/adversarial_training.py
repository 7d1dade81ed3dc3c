# Adversarial training, PGD-AT as PIR-AT's training script runs it (Croce et
# al., ECCV 2024): every image of every batch is replaced by PGD's, L-inf
# eps 4 levels (4/255), 2 steps of 2.55 levels, no random start, the model
# in eval mode for the attack (AdversarialTrainingHook always attacks so).
# From an ImageNet-robust backbone checkpoint this is PIR-AT; from a plain
# or random one, PGD-AT. Cost per iteration: 2 more forward and backward
# passes (to the input only) and one forward (the logged pixel accuracy);
# PIR-AT's 5-step variant: adversarial_training = dict(attack=dict(steps=5)).
# docs/evidence.md, "Adversarial training". Against SEA's APGD instead:
# name='apgd-mce' or 'apgd-js', steps >= 4 (its iterations); APGD sets its
# own step and start (step_size, random_start do not apply); apgd-mce-bal
# needs attack.class_weights.
#
# Inherit it beside any config, custom_hooks or not:
#   _base_ = ['CONFIG.py', '../_base_/adversarial_training.py']
# (the config needs custom_imports=dict(imports=['mmseg_elliptical'])). The
# recipe is a key of its own, the hook's arguments; the plugin's runner
# appends it to the config's custom_hooks as AdversarialTrainingHook when
# mmseg's tools build the runner. Change a field in the inheriting config,
# e.g. adversarial_training = dict(ratio=0.5, attack=dict(steps=5)).
runner_type = 'AdversarialTrainingRunner'
adversarial_training = dict(
    attack=dict(
        name='pgd',
        norm='linf',
        eps=4,
        steps=2,
        step_size=2.55,
        random_start=False),
    ratio=1.)
