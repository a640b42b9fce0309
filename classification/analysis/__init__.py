"""The paper's analyses: degradation curves (Figs. 1, 6) and layer-response statistics (Fig. 7)."""
