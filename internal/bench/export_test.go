package bench

// ProcessCPU exposes processCPU to the external tests.
var ProcessCPU = processCPU
