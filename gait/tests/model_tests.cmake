# Tests of the gait networks, training and evaluation (included from CMakeLists.txt).
# The torch-free part (config strictness, evaluator, reports, graph operators,
# augmentation) always runs; the LibTorch part builds only with LibTorch and is
# reported as skipped otherwise.
xs_add_test(NAME gait_model_core_tests SOURCES model_core_tests.cpp
  LIBS gait_train_core gait_eval_core gait_nets_core TIMEOUT 120)
if(GAIT_HAVE_TORCH)
  xs_add_test(NAME gait_net_tests SOURCES net_tests.cpp train_tests.cpp LIBS gait_eval gait_train TIMEOUT 400)
  if(TARGET gait_net_tests)
    gait_torch_pch(gait_net_tests)
    if(TARGET torch_cuda)
      # The same binary's CUDA tests (skipped without a device in the CPU entry above).
      add_test(NAME gait_net_gpu_tests COMMAND gait_net_tests --gtest_filter=CudaGraph.*)
      set_tests_properties(gait_net_gpu_tests PROPERTIES LABELS gpu TIMEOUT 400)
    endif()
  endif()
elseif(XSTAGE_BUILD_TESTS)
  add_test(NAME gait_net_tests COMMAND ${CMAKE_COMMAND} -E echo "gait_net_tests skipped: built without LibTorch")
  set_tests_properties(gait_net_tests PROPERTIES LABELS cpu SKIP_REGULAR_EXPRESSION "skipped")
endif()
if(GAIT_HAVE_TORCH AND XSTAGE_BUILD_TESTS)
  # The model sub-commands end to end on a generated 8-subject, 2-view dataset.
  add_test(NAME gait_model_cli_test
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/model_cli_test.sh $<TARGET_FILE:gait> ${PROJECT_SOURCE_DIR})
  set_tests_properties(gait_model_cli_test PROPERTIES LABELS cpu TIMEOUT 900)
endif()
