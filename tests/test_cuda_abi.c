/* tests/test_cuda_abi.c — the CUDA backend never includes a CUDA header, so
 * the enum values it copies (runtime/cuda/cuda_abi.h) and the types it
 * declares for dlopen'd entry points (runtime/cuda/dynload.h) are checked
 * here against the installed toolkit's headers: a program of static
 * assertions is compiled with them. Skips where the headers are absent. */
#include "test_util.h"

#ifndef CUDA_INCLUDE
#define CUDA_INCLUDE "/usr/local/cuda/include"
#endif

/* ours, the header's */
static const char *const SAME_VALUE[][2] = {
    {"CU_ATTR_MULTIPROCESSOR_COUNT", "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"},
    {"CU_ATTR_COMPUTE_CAPABILITY_MAJOR", "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"},
    {"CU_ATTR_COMPUTE_CAPABILITY_MINOR", "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"},
    {"CU_STREAM_NON_BLOCKING_FLAG", "CU_STREAM_NON_BLOCKING"},
    {"CU_RESULT_NOT_READY", "CUDA_ERROR_NOT_READY"},
    {"CU_EVENT_DISABLE_TIMING_FLAG", "CU_EVENT_DISABLE_TIMING"},
    {"NCCL_RESULT_SUCCESS", "ncclSuccess"},
    {"NCCL_RESULT_IN_PROGRESS", "ncclInProgress"},
    {"NCCL_TYPE_UINT8", "ncclUint8"},
    {"NCCL_TYPE_FLOAT32", "ncclFloat32"},
    {"NCCL_OP_SUM", "ncclSum"},
    {"DN_CONVOLUTION_DESCRIPTOR", "CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR"},
    {"DN_ENGINE_DESCRIPTOR", "CUDNN_BACKEND_ENGINE_DESCRIPTOR"},
    {"DN_ENGINECFG_DESCRIPTOR", "CUDNN_BACKEND_ENGINECFG_DESCRIPTOR"},
    {"DN_ENGINEHEUR_DESCRIPTOR", "CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR"},
    {"DN_EXECUTION_PLAN_DESCRIPTOR", "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR"},
    {"DN_OP_CONV_FORWARD", "CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR"},
    {"DN_OP_CONV_BACKWARD_FILTER", "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR"},
    {"DN_OP_CONV_BACKWARD_DATA", "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR"},
    {"DN_OPERATIONGRAPH_DESCRIPTOR", "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR"},
    {"DN_VARIANT_PACK_DESCRIPTOR", "CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR"},
    {"DN_TENSOR_DESCRIPTOR", "CUDNN_BACKEND_TENSOR_DESCRIPTOR"},
    {"DA_CONV_COMP_TYPE", "CUDNN_ATTR_CONVOLUTION_COMP_TYPE"},
    {"DA_CONV_MODE", "CUDNN_ATTR_CONVOLUTION_CONV_MODE"},
    {"DA_CONV_DILATIONS", "CUDNN_ATTR_CONVOLUTION_DILATIONS"},
    {"DA_CONV_FILTER_STRIDES", "CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES"},
    {"DA_CONV_POST_PADDINGS", "CUDNN_ATTR_CONVOLUTION_POST_PADDINGS"},
    {"DA_CONV_PRE_PADDINGS", "CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS"},
    {"DA_CONV_SPATIAL_DIMS", "CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS"},
    {"DA_ENGINEHEUR_MODE", "CUDNN_ATTR_ENGINEHEUR_MODE"},
    {"DA_ENGINEHEUR_OPERATION_GRAPH", "CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH"},
    {"DA_ENGINEHEUR_RESULTS", "CUDNN_ATTR_ENGINEHEUR_RESULTS"},
    {"DA_ENGINECFG_ENGINE", "CUDNN_ATTR_ENGINECFG_ENGINE"},
    {"DA_EXECUTION_PLAN_HANDLE", "CUDNN_ATTR_EXECUTION_PLAN_HANDLE"},
    {"DA_EXECUTION_PLAN_ENGINE_CONFIG", "CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG"},
    {"DA_EXECUTION_PLAN_WORKSPACE_SIZE", "CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE"},
    {"DA_OP_FWD_ALPHA", "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA"},
    {"DA_OP_FWD_BETA", "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA"},
    {"DA_OP_FWD_CONV_DESC", "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC"},
    {"DA_OP_FWD_W", "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W"},
    {"DA_OP_FWD_X", "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X"},
    {"DA_OP_FWD_Y", "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y"},
    {"DA_OP_BWD_DATA_ALPHA", "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA"},
    {"DA_OP_BWD_DATA_BETA", "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA"},
    {"DA_OP_BWD_DATA_CONV_DESC", "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC"},
    {"DA_OP_BWD_DATA_W", "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W"},
    {"DA_OP_BWD_DATA_DX", "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX"},
    {"DA_OP_BWD_DATA_DY", "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY"},
    {"DA_OP_BWD_FILTER_ALPHA", "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA"},
    {"DA_OP_BWD_FILTER_BETA", "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA"},
    {"DA_OP_BWD_FILTER_CONV_DESC", "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC"},
    {"DA_OP_BWD_FILTER_DW", "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW"},
    {"DA_OP_BWD_FILTER_X", "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X"},
    {"DA_OP_BWD_FILTER_DY", "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY"},
    {"DA_OPERATIONGRAPH_HANDLE", "CUDNN_ATTR_OPERATIONGRAPH_HANDLE"},
    {"DA_OPERATIONGRAPH_OPS", "CUDNN_ATTR_OPERATIONGRAPH_OPS"},
    {"DA_TENSOR_BYTE_ALIGNMENT", "CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT"},
    {"DA_TENSOR_DATA_TYPE", "CUDNN_ATTR_TENSOR_DATA_TYPE"},
    {"DA_TENSOR_DIMENSIONS", "CUDNN_ATTR_TENSOR_DIMENSIONS"},
    {"DA_TENSOR_STRIDES", "CUDNN_ATTR_TENSOR_STRIDES"},
    {"DA_TENSOR_UNIQUE_ID", "CUDNN_ATTR_TENSOR_UNIQUE_ID"},
    {"DA_VARIANT_PACK_UNIQUE_IDS", "CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS"},
    {"DA_VARIANT_PACK_DATA_POINTERS", "CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS"},
    {"DA_VARIANT_PACK_WORKSPACE", "CUDNN_ATTR_VARIANT_PACK_WORKSPACE"},
    {"DA_ENGINE_NUMERICAL_NOTE", "CUDNN_ATTR_ENGINE_NUMERICAL_NOTE"},
    {"AT_HANDLE", "CUDNN_TYPE_HANDLE"},
    {"AT_DATA_TYPE", "CUDNN_TYPE_DATA_TYPE"},
    {"AT_INT64", "CUDNN_TYPE_INT64"},
    {"AT_FLOAT", "CUDNN_TYPE_FLOAT"},
    {"AT_VOID_PTR", "CUDNN_TYPE_VOID_PTR"},
    {"AT_CONVOLUTION_MODE", "CUDNN_TYPE_CONVOLUTION_MODE"},
    {"AT_HEUR_MODE", "CUDNN_TYPE_HEUR_MODE"},
    {"AT_NUMERICAL_NOTE", "CUDNN_TYPE_NUMERICAL_NOTE"},
    {"AT_BACKEND_DESCRIPTOR", "CUDNN_TYPE_BACKEND_DESCRIPTOR"},
    {"DNN_DATA_FLOAT", "CUDNN_DATA_FLOAT"},
    {"DNN_DATA_HALF", "CUDNN_DATA_HALF"},
    {"DNN_DATA_BFLOAT16", "CUDNN_DATA_BFLOAT16"},
    {"DNN_CROSS_CORRELATION", "CUDNN_CROSS_CORRELATION"},
    {"DNN_HEUR_MODE_FALLBACK", "CUDNN_HEUR_MODE_FALLBACK"},
    {"DNN_HEUR_MODE_A", "CUDNN_HEUR_MODE_A"},
    {"NOTE_TENSOR_CORE", "CUDNN_NUMERICAL_NOTE_TENSOR_CORE"},
    {"NOTE_DOWN_CONVERT_INPUTS", "CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS"},
    {"NOTE_REDUCED_PRECISION_REDUCTION", "CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION"},
    {"NOTE_FFT", "CUDNN_NUMERICAL_NOTE_FFT"},
    {"NOTE_NONDETERMINISTIC", "CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC"},
};

/* dynload.h's stand-ins, the header's types: same size (and alignment, for
 * what crosses the call by pointer or by value) */
static const char *const SAME_LAYOUT[][2] = {
    {"CuResult", "CUresult"},
    {"CuDevice", "CUdevice"},
    {"CuDevicePtr", "CUdeviceptr"},
    {"CudnnStatus", "cudnnStatus_t"},
    {"CublasStatus", "cublasStatus_t"},
    {"CublasLtMatmulAlgo", "cublasLtMatmulAlgo_t"},
    {"CublasLtMatmulHeuristicResult", "cublasLtMatmulHeuristicResult_t"},
    {"NcclResult", "ncclResult_t"},
    {"NcclUniqueId", "ncclUniqueId"},
};

Test(cuda_abi, mirrored_values_and_types_match_the_toolkit_headers) {
    struct stat st;
    if (stat(CUDA_INCLUDE "/cudnn_graph.h", &st) != 0 || stat(CUDA_INCLUDE "/cuda.h", &st) != 0) cr_skip_test("SKIP: no CUDA headers in " CUDA_INCLUDE);
    char src[] = "/tmp/yolocc-abi-XXXXXX.c", cwd[512], cmd[1400];
    int fd = mkstemps(src, 2);
    cr_assert(fd >= 0 && getcwd(cwd, sizeof cwd));
    FILE *f = fdopen(fd, "w");
    cr_assert(f);
    fprintf(f, "#include <cuda.h>\n#include <cudnn_graph.h>\n#include <cublasLt.h>\n#include <nccl.h>\n");
    fprintf(f, "#include \"%s/runtime/cuda/cuda_abi.h\"\n#include \"%s/runtime/cuda/dynload.h\"\n", cwd, cwd);
    for (size_t i = 0; i < sizeof SAME_VALUE / sizeof SAME_VALUE[0]; i++)
        fprintf(f, "_Static_assert((long long)%s == (long long)%s, \"%s is not %s\");\n", SAME_VALUE[i][0], SAME_VALUE[i][1], SAME_VALUE[i][0], SAME_VALUE[i][1]);
    for (size_t i = 0; i < sizeof SAME_LAYOUT / sizeof SAME_LAYOUT[0]; i++)
        fprintf(f, "_Static_assert(sizeof(%s) == sizeof(%s) && _Alignof(%s) == _Alignof(%s), \"%s is laid out unlike %s\");\n", SAME_LAYOUT[i][0],
                SAME_LAYOUT[i][1], SAME_LAYOUT[i][0], SAME_LAYOUT[i][1], SAME_LAYOUT[i][0], SAME_LAYOUT[i][1]);
    /* the heuristic result's fields are read by name: same offsets */
    fprintf(f, "#include <stddef.h>\n_Static_assert(offsetof(CublasLtMatmulHeuristicResult, workspace_size) == offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize) && "
               "offsetof(CublasLtMatmulHeuristicResult, state) == offsetof(cublasLtMatmulHeuristicResult_t, state), \"heuristic result fields\");\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "cc -std=c11 -fsyntax-only -I%s %s 2>&1", CUDA_INCLUDE, src);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    char out[4096] = "";
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int status = pclose(p);
    unlink(src);
    cr_expect_eq(status, 0, "the mirrored CUDA values or types differ from the headers:\n%s", out);
    cr_log_info("%zu values and %zu types checked against %s", sizeof SAME_VALUE / sizeof SAME_VALUE[0], sizeof SAME_LAYOUT / sizeof SAME_LAYOUT[0], CUDA_INCLUDE);
}
