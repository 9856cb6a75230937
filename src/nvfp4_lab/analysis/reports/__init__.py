"""What is written: a sweep's report (``report``, ``sections``, ``downstream``), its
figures (``figures``, ``paper_figures``), the results index (``index``) and publishing a
sweep into ``results/`` (``publish``)."""
