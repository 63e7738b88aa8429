/* runtime/cuda/cuda_abi.h — the enum values of the CUDA driver, cuDNN and NCCL
 * headers that the backend passes through dynload.h's entry points, copied
 * here because no project file includes a CUDA header. Each names the header
 * symbol it mirrors; tests/test_cuda_abi.c checks every one against the
 * installed headers. Values only: no types, no calls. */
#ifndef YOLOCC_CUDA_ABI_H
#define YOLOCC_CUDA_ABI_H

/* cuda.h: CUdevice_attribute values */
enum {
    CU_ATTR_MULTIPROCESSOR_COUNT = 16,        /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
    CU_ATTR_COMPUTE_CAPABILITY_MAJOR = 75,    /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
    CU_ATTR_COMPUTE_CAPABILITY_MINOR = 76,    /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR */
};
/* cuda.h: CUstream_flags; the step's streams must not serialise with the legacy default stream */
enum { CU_STREAM_NON_BLOCKING_FLAG = 0x1 };
/* cuda.h: CUresult of cuEventQuery while the event's work is still running (CUDA_ERROR_NOT_READY) */
enum { CU_RESULT_NOT_READY = 600 };
/* cuda.h: CUevent_flags; the watchdog's events only order and poll, timing would cost */
enum { CU_EVENT_DISABLE_TIMING_FLAG = 0x2 };

/* nccl.h: ncclResult_t, ncclDataType_t, ncclRedOp_t values comm_nccl.c passes or reads */
enum { NCCL_RESULT_SUCCESS = 0, NCCL_RESULT_IN_PROGRESS = 7 };  /* ncclSuccess, ncclInProgress */
enum { NCCL_TYPE_UINT8 = 1, NCCL_TYPE_FLOAT32 = 7 };            /* ncclUint8, ncclFloat32 */
enum { NCCL_OP_SUM = 0 };                                        /* ncclSum */

/* cudnn_graph.h: cudnnBackendDescriptorType_t */
enum {
    DN_CONVOLUTION_DESCRIPTOR = 1,      /* CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR */
    DN_ENGINE_DESCRIPTOR = 2,           /* CUDNN_BACKEND_ENGINE_DESCRIPTOR */
    DN_ENGINECFG_DESCRIPTOR = 3,        /* CUDNN_BACKEND_ENGINECFG_DESCRIPTOR */
    DN_ENGINEHEUR_DESCRIPTOR = 4,       /* CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR */
    DN_EXECUTION_PLAN_DESCRIPTOR = 5,   /* CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR */
    DN_OP_CONV_FORWARD = 10,            /* CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR */
    DN_OP_CONV_BACKWARD_FILTER = 11,    /* CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR */
    DN_OP_CONV_BACKWARD_DATA = 12,      /* CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR */
    DN_OPERATIONGRAPH_DESCRIPTOR = 15,  /* CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR */
    DN_VARIANT_PACK_DESCRIPTOR = 16,    /* CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR */
    DN_TENSOR_DESCRIPTOR = 17,          /* CUDNN_BACKEND_TENSOR_DESCRIPTOR */
};
/* cudnn_graph.h: cudnnBackendAttributeName_t */
enum {
    DA_CONV_COMP_TYPE = 100, DA_CONV_MODE = 101, DA_CONV_DILATIONS = 102, DA_CONV_FILTER_STRIDES = 103,   /* CUDNN_ATTR_CONVOLUTION_* */
    DA_CONV_POST_PADDINGS = 104, DA_CONV_PRE_PADDINGS = 105, DA_CONV_SPATIAL_DIMS = 106,
    DA_ENGINEHEUR_MODE = 200, DA_ENGINEHEUR_OPERATION_GRAPH = 201, DA_ENGINEHEUR_RESULTS = 202,            /* CUDNN_ATTR_ENGINEHEUR_* */
    DA_ENGINECFG_ENGINE = 300,                                                                              /* CUDNN_ATTR_ENGINECFG_ENGINE */
    DA_EXECUTION_PLAN_HANDLE = 400, DA_EXECUTION_PLAN_ENGINE_CONFIG = 401, DA_EXECUTION_PLAN_WORKSPACE_SIZE = 402, /* CUDNN_ATTR_EXECUTION_PLAN_* */
    DA_OP_FWD_ALPHA = 700, DA_OP_FWD_BETA = 701, DA_OP_FWD_CONV_DESC = 702, DA_OP_FWD_W = 703, DA_OP_FWD_X = 704, DA_OP_FWD_Y = 705,
    DA_OP_BWD_DATA_ALPHA = 706, DA_OP_BWD_DATA_BETA = 707, DA_OP_BWD_DATA_CONV_DESC = 708, DA_OP_BWD_DATA_W = 709, DA_OP_BWD_DATA_DX = 710,
    DA_OP_BWD_DATA_DY = 711,
    DA_OP_BWD_FILTER_ALPHA = 712, DA_OP_BWD_FILTER_BETA = 713, DA_OP_BWD_FILTER_CONV_DESC = 714, DA_OP_BWD_FILTER_DW = 715,
    DA_OP_BWD_FILTER_X = 716, DA_OP_BWD_FILTER_DY = 717,   /* CUDNN_ATTR_OPERATION_CONVOLUTION_* */
    DA_OPERATIONGRAPH_HANDLE = 800, DA_OPERATIONGRAPH_OPS = 801,                                            /* CUDNN_ATTR_OPERATIONGRAPH_* */
    DA_TENSOR_BYTE_ALIGNMENT = 900, DA_TENSOR_DATA_TYPE = 901, DA_TENSOR_DIMENSIONS = 902, DA_TENSOR_STRIDES = 903,
    DA_TENSOR_UNIQUE_ID = 906,                                                                              /* CUDNN_ATTR_TENSOR_* */
    DA_VARIANT_PACK_UNIQUE_IDS = 1000, DA_VARIANT_PACK_DATA_POINTERS = 1001, DA_VARIANT_PACK_WORKSPACE = 1003, /* CUDNN_ATTR_VARIANT_PACK_* */
    DA_ENGINE_GLOBAL_INDEX = 1301, DA_ENGINE_NUMERICAL_NOTE = 1303, DA_ENGINE_BEHAVIOR_NOTE = 1305,        /* CUDNN_ATTR_ENGINE_* */
};
/* cudnn_graph.h: cudnnBackendAttributeType_t */
enum { AT_HANDLE = 0, AT_DATA_TYPE = 1, AT_INT64 = 3, AT_FLOAT = 4, AT_VOID_PTR = 6, AT_CONVOLUTION_MODE = 7, AT_HEUR_MODE = 8,
       AT_NUMERICAL_NOTE = 11, AT_BACKEND_DESCRIPTOR = 15, AT_BEHAVIOR_NOTE = 19 };
/* cudnn_graph.h: cudnnDataType_t, cudnnConvolutionMode_t, cudnnBackendHeurMode_t, cudnnBackendNumericalNote_t */
enum { DNN_DATA_FLOAT = 0, DNN_DATA_HALF = 2, DNN_DATA_BFLOAT16 = 9 };
enum { DNN_CROSS_CORRELATION = 1 };
enum { DNN_HEUR_MODE_FALLBACK = 2, DNN_HEUR_MODE_A = 3 };
enum { NOTE_TENSOR_CORE = 0, NOTE_DOWN_CONVERT_INPUTS = 1, NOTE_REDUCED_PRECISION_REDUCTION = 2, NOTE_FFT = 3, NOTE_NONDETERMINISTIC = 4 };
/* cudnn_graph.h: cudnnBackendBehaviorNote_t */
enum { BNOTE_RUNTIME_COMPILATION = 0 };

/* cublasLt.h / cublas_api.h / library_types.h: what cublaslt_gemm.c passes to cuBLASLt or reads back */
enum { LT_COMPUTE_32F = 68 };                               /* CUBLAS_COMPUTE_32F (fp32 accumulation, not CUBLAS_COMPUTE_32F_FAST_TF32) */
enum { LT_R_32F = 0, LT_R_16F = 2, LT_R_16BF = 14 };        /* CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF (cudaDataType_t) */
enum { LT_OP_N = 0, LT_OP_T = 1 };                          /* CUBLAS_OP_N, CUBLAS_OP_T (cublasOperation_t) */
enum { LT_DESC_TRANSA = 3, LT_DESC_TRANSB = 4 };            /* CUBLASLT_MATMUL_DESC_TRANSA, CUBLASLT_MATMUL_DESC_TRANSB */
enum { LT_LAYOUT_BATCH_COUNT = 5, LT_LAYOUT_STRIDED_BATCH_OFFSET = 6 };   /* CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, ..._STRIDED_BATCH_OFFSET */
enum {
    LT_PREF_MAX_WORKSPACE_BYTES = 1,                        /* CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES */
    LT_PREF_MIN_ALIGNMENT_A_BYTES = 5, LT_PREF_MIN_ALIGNMENT_B_BYTES = 6,  /* CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B}_BYTES */
    LT_PREF_MIN_ALIGNMENT_C_BYTES = 7, LT_PREF_MIN_ALIGNMENT_D_BYTES = 8,  /* CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{C,D}_BYTES */
};
/* cublas_api.h: cublasStatus_t (CUBLAS_STATUS_*) */
enum {
    LT_STATUS_SUCCESS = 0, LT_STATUS_NOT_INITIALIZED = 1, LT_STATUS_ALLOC_FAILED = 3, LT_STATUS_INVALID_VALUE = 7, LT_STATUS_ARCH_MISMATCH = 8,
    LT_STATUS_MAPPING_ERROR = 11, LT_STATUS_EXECUTION_FAILED = 13, LT_STATUS_INTERNAL_ERROR = 14, LT_STATUS_NOT_SUPPORTED = 15, LT_STATUS_LICENSE_ERROR = 16,
};

#endif
