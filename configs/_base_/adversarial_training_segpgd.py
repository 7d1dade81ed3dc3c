# SegPGD-AT (Gu et al., ECCV 2022): the images replaced by SegPGD's, L-inf
# eps 8 levels (8/255), 3 steps of 2 levels from a random start. The step
# count and size are read from the paper's training setting as we recall
# it (docs/evidence.md says what was not re-checked). Cost per iteration: 3
# more forward and backward passes (to the input only) and one forward.
# Inherit it beside any config, as configs/_base_/adversarial_training.py.
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
