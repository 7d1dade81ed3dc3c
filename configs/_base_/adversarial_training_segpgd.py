# SegPGD-AT (Gu, Zhao, Tresp and Torr, ECCV 2022): the images replaced by
# SegPGD's, L-inf eps 8 levels (8/255), 3 steps of 2 levels from a random
# start, every image (ratio=1). NOT checked against the paper or its
# released code: the authors' code was not found (the two public
# "SegPGD" repositories indexed are third-party), and the paper's text on
# its training attack was not at hand. Unconfirmed: the step size (2
# levels), the random start, and the clean / adversarial split (ratio=1,
# every image adversarial; if the paper mixes clean and adversarial
# images as DDC-AT does, set ratio=0.5). The eps and the 3 steps are the
# earlier reading of the paper, not re-checked. docs/evidence.md,
# "Adversarial training". Cost per iteration: 3 more forward and backward
# passes (to the input only) and one forward. Inherit it beside any
# config, as configs/_base_/adversarial_training.py.
runner_type = 'AdversarialTrainingRunner'
adversarial_training = dict(
    attack=dict(
        name='segpgd',
        norm='linf',
        eps=8,
        steps=3,
        step_size=2,
        random_start=True),
    ratio=1.)
