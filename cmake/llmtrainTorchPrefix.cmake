# Where LibTorch is looked for, by the build and by the installed package alike: unless Torch_DIR is
# given, the Python interpreter (Python3_EXECUTABLE, else python3 on PATH) is asked where its torch keeps
# its CMake files (PyPI's torch wheel carries LibTorch), and that goes at the end of CMAKE_PREFIX_PATH, so
# an entry already there comes first.
macro(llmtrain_add_torch_prefix)
  set(_llmtrain_torch_rc 1)  # 0 once the interpreter answered
  if(NOT Torch_DIR)
    set(_llmtrain_python "${Python3_EXECUTABLE}")
    if(NOT _llmtrain_python)
      find_program(_llmtrain_python NAMES python3)
    endif()
    if(_llmtrain_python)
      execute_process(
        COMMAND "${_llmtrain_python}" -c "import torch; print(torch.utils.cmake_prefix_path)"
        OUTPUT_VARIABLE _llmtrain_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
        RESULT_VARIABLE _llmtrain_torch_rc ERROR_QUIET)
      if(_llmtrain_torch_rc EQUAL 0)
        list(APPEND CMAKE_PREFIX_PATH "${_llmtrain_torch_prefix}")
      endif()
    endif()
  endif()
endmacro()
