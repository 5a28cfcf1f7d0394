-- wrk script for the correctness run: prints wrk's measured duration in whole microseconds
-- (its summary line rounds it to 10 ms, which at 1000/s is 10 tokens of the bound).
done = function(summary, latency, requests)
  io.write(string.format("duration_us %d\n", summary.duration))
end
