"""Adversarial training from any config: each training batch is replaced,
before the step, by adversarial images crafted on the current model with the
grid's own attack code (:class:`~mmseg_elliptical.robustness.attacks.training.TrainingAttacker`)."""  # noqa: E501
from typing import Optional

from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmseg.registry import HOOKS

from ...robustness.attacks.losses import BALANCED
from ...robustness.attacks.training import (ACCURACY_KEY, TrainingAttacker,
                                            _fail, check_model)


@HOOKS.register_module()
class AdversarialTrainingHook(TrainingAttacker, Hook):
    """Train on adversarial images (PGD-AT, PIR-AT, SegPGD-AT, or APGD).

    Before each training iteration the images of the batch (all, or a
    fraction ``ratio`` drawn per image) are replaced in ``data_batch`` by
    adversarial ones crafted on the current model: the model in eval mode,
    the gradient to the input only, the training-time logits against the
    batch's labels. The mode, the parameters' ``requires_grad`` flags and
    gradients and every random state are as before when the step runs.
    Which images are attacked and their random start are seeded by (image
    path relative to the training data's root, iteration, ``seed``): epochs
    draw new starts, two processes choose as one, a resumed run continues
    exactly (the hook keeps no state), wherever the data lies.

    Args:
        attack (dict): :class:`..robustness.attacks.Attack`'s
            fields but ``labels`` (always the ground truth) and ``seed``:
            ``name`` (``pgd``, ``segpgd``, ``cospgd``, ``fgsm``; APGD as
            SEA's training attack, :class:`TrainingAttack`: ``apgd-ce``,
            its plain cross-entropy, or another loss, ``apgd-mce``,
            ``apgd-js``, ``apgd-mce-bal`` with its ``class_weights``, one
            per class, as the grid counts them),
            ``norm`` (``linf``: eps and step in 0-255 levels, ``'4/255'``
            understood; ``l2``: on the 0-1 scale), ``eps``, ``steps``
            (APGD: its iterations), ``step_size`` and
            ``random_start`` (APGD: not needed, and as on the grid they do
            not apply: it sets its own step and always starts at random).
        ratio (float): Fraction of the images attacked, in [0, 1].
            Defaults to 1 (the whole batch).
        adaptive (bool): Differentiate through the relevance ``m`` too (an
            elliptical model's adaptive attack). Defaults to False.
        seed (int): Seed of the choice and the random starts. Defaults to 0.
        allow_small_eps (bool): Take an L-inf eps below 0.25 levels as
            written. Defaults to False.
        log_accuracy (bool): Log the pixel accuracy on the attacked images
            (one more forward, without gradient) as ``adv_pixel_acc``.
            Defaults to True.
    """
    priority = 'LOW'  # after IterTimerHook: the attack is no data time

    def before_train(self, runner) -> None:
        """Refuse a model the hook cannot attack, or class weights of
        another number of classes, before the first step."""
        model = self._model(runner)
        check_model(model)
        dataset = getattr(
            getattr(runner, 'train_dataloader', None), 'dataset', None)
        self.data_root = getattr(dataset, 'data_root', None)
        weights = self.attack.class_weights
        classes = model.decode_head.num_classes
        if self.attack.name in BALANCED and len(weights) != classes:
            _fail(f'attack.class_weights has {len(weights)} weights and the '
                  f'decode head {classes} classes: give one per class')

    @staticmethod
    def _model(runner):
        model = runner.model
        return model.module if is_model_wrapper(model) else model

    def before_train_iter(self,
                          runner,
                          batch_idx: int,
                          data_batch: Optional[dict] = None) -> None:
        """Replace the chosen images of ``data_batch`` by adversarial ones
        (``data_batch['inputs']`` changed in place); log their accuracy."""
        accuracy = self.attack_batch(
            self._model(runner), data_batch, batch_idx, runner.iter,
            getattr(runner, 'optim_wrapper', None))
        if accuracy is not None:
            runner.message_hub.update_scalar(ACCURACY_KEY, accuracy)
