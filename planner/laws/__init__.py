"""Laws: the fitted step model, the step model with lengths, length samples and the TTFT residual (pure)."""
