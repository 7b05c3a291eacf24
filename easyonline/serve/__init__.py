"""The serving processor: loads an export, follows the update stream, answers predictions over HTTP."""
