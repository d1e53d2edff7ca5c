"""A derived summary of Tiresias' job-size sample (``tiresias/yarn-gput1000.csv``).

The Tiresias authors use that file (1001 samples of job GPU-seconds from a production cluster)
as the prior of their Gittins-index policy. Shipped here: its 101 percentiles (level ``p/100``
takes the sorted sample at index ``round(p/100 × (n - 1))``), its size and mean — not the file.
``tests/unit/test_policy_gittins.py`` re-derives these from the real file when it is present.
"""

SAMPLE_COUNT = 1001
SAMPLE_MEAN_GPU_S = 150839.15784215785
PERCENTILES_GPU_S: tuple[float, ...] = (
    121.0, 138.0, 156.0, 175.0, 190.0, 211.0, 237.0, 268.0,
    304.0, 324.0, 357.0, 410.0, 467.0, 507.0, 536.0, 552.0,
    566.0, 584.0, 607.0, 639.0, 672.0, 708.0, 748.0, 788.0,
    828.0, 860.0, 885.0, 911.0, 951.0, 997.0, 1049.0, 1104.0,
    1159.0, 1210.0, 1269.0, 1331.0, 1400.0, 1448.0, 1483.0, 1517.0,
    1559.0, 1613.0, 1695.0, 1781.0, 1851.0, 1908.0, 1966.0, 2022.0,
    2070.0, 2133.0, 2227.0, 2332.0, 2416.0, 2479.0, 2533.0, 2577.0,
    2625.0, 2679.0, 2744.0, 2833.0, 3064.0, 3348.0, 3500.0, 3712.0,
    3954.0, 4081.0, 4344.0, 4702.0, 5097.0, 5332.0, 5555.0, 5770.0,
    5937.0, 6228.0, 6974.0, 8215.0, 8884.0, 9375.0, 10424.0, 11185.0,
    12706.0, 14384.0, 16048.0, 19387.0, 23840.0, 29168.0, 36641.0, 44431.0,
    54232.0, 61692.0, 75999.0, 99075.0, 124655.0, 167080.0, 230480.0, 326172.0,
    467939.0, 721700.0, 1259182.0, 2268824.0, 53294624.0,
)
