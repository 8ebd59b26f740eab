# ferry_test(NAME SOURCE LIBS...): one doctest executable, registered with CTest.
# Tests run from the source root so they can read examples/ and tests/data/.
add_library(ferry_doctest_main STATIC ${CMAKE_CURRENT_LIST_DIR}/doctest_main.cc)
target_link_libraries(ferry_doctest_main PUBLIC doctest::doctest)

function(ferry_test name source)
  add_executable(${name} ${source})
  target_link_libraries(${name} PRIVATE ferry_doctest_main ${ARGN})
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
endfunction()
