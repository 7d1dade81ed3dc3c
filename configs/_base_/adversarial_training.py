# Adversarial training, PGD-AT as PIR-AT's training script runs it (Croce,
# Singh and Hein, ECCV 2024; nmndeep/Robust-Segmentation, tools/
# train_rob_seg.py with its Pgd_Attack): every image of every batch is
# replaced by PGD's on plain cross-entropy, L-inf eps 4 levels (4/255), 5
# steps of 2.55 levels (alpha 1e-2 on the 0-1 scale), no random start (a
# zero delta), the model in eval mode for the attack (AdversarialTrainingHook
# always attacks so). 5 steps is N_ITERS of SEA's ADE20K Segmenter and
# Pascal VOC configs; ADE20K ConvNeXt runs 20:
# adversarial_training_pirat_20.py. The 2-step cheap recipe (2 is only the
# default of Pgd_Attack's constructor) is adversarial_training_cheap.py.
# From an ImageNet-robust backbone checkpoint this is PIR-AT; from a plain
# or random one, PGD-AT. Cost per iteration: 5 more forward and backward
# passes (to the input only) and one forward (the logged pixel accuracy).
# docs/evidence.md, "Adversarial training", says where the hook's PGD and
# APGD differ from SEA's. Against SEA's APGD instead (its configs' ATTACK
# other than pgd: apgd_train, one stage at eps, loss 'ce-avg'):
#   adversarial_training = dict(attack=dict(name='apgd-ce', steps=5))
# (eps 4 levels as here; steps: its N_ITERS, the iterations). The hook's
# APGD is always SEA's training attack (one stage from a random start in
# the eps ball, the point of highest loss; not the grid's evaluation
# APGD); it sets its own step (2 eps, halved at checkpoints) and start
# (the step_size and random_start above do not apply). apgd-mce, apgd-js
# and apgd-mce-bal (with attack.class_weights) train with another of
# SEA's losses.
#
# Inherit it beside any config, custom_hooks or not:
#   _base_ = ['CONFIG.py', '../_base_/adversarial_training.py']
# (the config needs custom_imports=dict(imports=['mmseg_elliptical'])). The
# recipe is a key of its own, the hook's arguments; the plugin's runner
# appends it to the config's custom_hooks as AdversarialTrainingHook when
# mmseg's tools build the runner. Change a field in the inheriting config,
# e.g. adversarial_training = dict(ratio=0.5, attack=dict(steps=2)).
runner_type = 'AdversarialTrainingRunner'
adversarial_training = dict(
    attack=dict(
        name='pgd',
        norm='linf',
        eps=4,
        steps=5,
        step_size=2.55,
        random_start=False),
    ratio=1.)
