"""Sequence-level knowledge distillation (Kim & Rush 2016): a teacher's translations become a
student's training targets."""
