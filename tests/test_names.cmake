# The test-name check: no Catch2 TEST_CASE name holds a ';', which CTest's discovery takes as a list
# separator (the test becomes two, neither matching a test: both fail or, worse, one runs nothing).
# Run as   cmake -DROOT=<repo> -P tests/test_names.cmake   ; prints each offending name as file: name.
file(GLOB_RECURSE sources "${ROOT}/tests/*.cpp" "${ROOT}/tests/*.h")
set(bad 0)
foreach(f IN LISTS sources)
  file(READ "${f}" text)
  string(REGEX MATCHALL "TEST_CASE\\(\"[^\"]*;[^\"]*\"" hits "${text}")
  if(hits)
    string(REPLACE "${ROOT}/" "" rel "${f}")
    message("${rel}: a test name with ';'")
    math(EXPR bad "${bad} + 1")
  endif()
endforeach()
if(bad GREATER 0)
  message(FATAL_ERROR "${bad} file(s) name a test with ';' (CTest splits the name there)")
endif()
